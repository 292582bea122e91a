"""An agent's session with slurm-mcp through the official MCP Python SDK (tests/integration/mcp.rs).

Reads a JSON configuration (argv[1]): the server program, its environment and folder, the job
document, an MFA document, a foreign job's id and the command that logs the person in. Writes
every call and its result to argv[2] as JSON, for the Rust test to check. The calls:

1. list the tools; check each input schema is a valid JSON Schema and the sample document
   validates against the `document` property (the contract's own schema);
2. the pipeline: resolve, preflight, sync_tracked, sync_untracked, submit (each action planned
   first: the policy requires it), watch, report;
3. an action without its plan (refused: require_plan), a submission over the GPU-hour budget
   (refused naming the limit), a cancel of a job the tools did not submit (refused); plans of a
   cancel and of allocations (one over the budget at its partition's maximum walltime);
4. preflight on the MFA host without a login (the command for the person), then with
   wait_for_login_seconds while "the person" logs in (a background task).
"""

import json
import subprocess
import sys

import anyio
import jsonschema
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation


def as_dict(result):
    text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    return {
        "is_error": bool(result.is_error),
        "text": text,
        "structured": result.structured_content,
    }


async def main(config, out_path):
    calls = []
    params = StdioServerParameters(
        command=config["server"], args=[], env=config["env"], cwd=config["cwd"]
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write, client_info=Implementation(name="slurm-tools-test-agent", version="1.0")
        ) as session:
            init = await session.initialize()
            tools = (await session.list_tools()).tools
            schemas = {t.name: t.input_schema for t in tools}
            for name, schema in schemas.items():
                jsonschema.Draft202012Validator.check_schema(schema)
            doc = config["document"]
            jsonschema.Draft202012Validator(schemas["resolve"]).validate({"document": doc})
            jsonschema.Draft202012Validator(schemas["submit"]).validate(
                {"document": doc, "plan": True}
            )
            invalid = True
            try:
                jsonschema.Draft202012Validator(schemas["submit"]).validate(
                    {"document": {"node_count": "two"}}
                )
            except jsonschema.ValidationError:
                invalid = False

            async def call(name, args):
                r = as_dict(await session.call_tool(name, args))
                calls.append({"tool": name, "args": args, **r})
                return r

            async def step(name, document, action=False):
                if action:
                    plan = await call(name, {"document": document, "plan": True})
                    if plan["is_error"]:
                        return plan
                    return await call(
                        name, {"document": document, "plan_id": plan["structured"]["plan_id"]}
                    )
                return await call(name, {"document": document})

            d = doc
            for name, action in [
                ("resolve", False),
                ("preflight", False),
                ("sync_tracked", True),
                ("sync_untracked", True),
                ("submit", True),
                ("watch", False),
            ]:
                r = await step(name, d, action)
                if r["is_error"] or not r["structured"]:
                    break
                d = r["structured"]
            await call("report", {"document": d})
            await call("runs", {})

            # Refusals.
            await call("submit", {"document": d})
            big = dict(config["document"])
            big.update({"gpus_per_node": 4, "node_count": 2, "time_limit": "01:00:00"})
            await call("submit", {"document": big, "plan": True})
            foreign = dict(d)
            foreign["job"] = dict(d.get("job") or {}, job_id=config["foreign_job_id"])
            await call("cancel", {"document": foreign, "plan": True})
            await call("cancel", {"document": foreign})
            # Its own job: a plan says the exact command (not carried out).
            await call("cancel", {"document": d, "plan": True})
            # An allocation holds its partition's maximum walltime (4 h here): 1 GPU is over
            # the per-run budget; without GPUs the plan says the salloc it would run.
            await call("alloc_up", {"document": d, "plan": True})
            cpu_only = {k: v for k, v in d.items() if k != "gpus_per_node"}
            await call("alloc_up", {"document": cpu_only, "plan": True})
            await call("nonexistent_tool", {})

            # MFA stays human: the command for the person, then a wait while they log in.
            await call("preflight", {"document": config["mfa_document"]})

            async def person_logs_in():
                await anyio.sleep(4)
                subprocess.run(config["login_command"], check=True)

            async with anyio.create_task_group() as tg:
                tg.start_soon(person_logs_in)
                await call(
                    "preflight",
                    {"document": config["mfa_document"], "wait_for_login_seconds": 90},
                )

    with open(out_path, "w") as f:
        json.dump(
            {
                "protocol_version": init.protocol_version,
                "tools": sorted(schemas),
                "bad_document_accepted": invalid,
                "calls": calls,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        config = json.load(f)
    anyio.run(main, config, sys.argv[2])
