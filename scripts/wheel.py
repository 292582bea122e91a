#!/usr/bin/env python3
"""Write a wheel that carries binaries, laid out as maturin's `bindings = "bin"` lays it out.

  scripts/wheel.py --name slurm-tools --version 0.1.0 --platform-tag TAG --out DIR \\
      [--summary TEXT] [--readme README.md] BINARY...

Each BINARY goes to `<name>-<version>.data/scripts/`, which pip, pipx and uv install into the
environment's bin directory, executable. TAG may join several platform tags with dots (a static
binary: `manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_2_x86_64`).

scripts/release uses it so that the binaries are compiled once, all together (cargo builds them
in parallel), and then packed twice, into the archive and into the wheel: maturin compiles each
binary of a `bindings = "bin"` package by itself through `cargo rustc`, one after another (seen
here: one rustc at a time, a core idle through each binary's single-unit LTO), and would build
them a second time besides the archive's. Standard library only; the output is reproducible
(fixed timestamps, sorted entries).
"""
import argparse
import base64
import hashlib
import os
import sys
import zipfile

EPOCH = (1980, 1, 1, 0, 0, 0)


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def add(z, records, name, data, mode):
    info = zipfile.ZipInfo(name, date_time=EPOCH)
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)
    records.append(record_line(name, data))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--platform-tag", required=True)
    ap.add_argument("--summary", default="")
    ap.add_argument("--readme")
    ap.add_argument("--requires-python", default=">=3.8")
    ap.add_argument("--license", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()

    dist = args.name.replace("-", "_")
    data_dir = f"{dist}-{args.version}.data"
    info_dir = f"{dist}-{args.version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {args.name}",
        f"Version: {args.version}",
        f"Summary: {args.summary}",
        f"Requires-Python: {args.requires_python}",
    ]
    if args.license:
        metadata.append(f"License: {args.license}")
    body = ""
    if args.readme:
        metadata.append("Description-Content-Type: text/markdown")
        with open(args.readme, encoding="utf-8") as f:
            body = f.read()
    meta = ("\n".join(metadata) + "\n\n" + body).encode()
    wheel = "".join(
        line + "\n"
        for line in [
            "Wheel-Version: 1.0",
            "Generator: slurm-tools scripts/wheel.py",
            "Root-Is-Purelib: false",
            *[f"Tag: py3-none-{t}" for t in args.platform_tag.split(".")],
        ]
    ).encode()

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{dist}-{args.version}-py3-none-{args.platform_tag}.whl")
    records = []
    with zipfile.ZipFile(path + ".tmp", "w") as z:
        for b in sorted(args.binaries, key=os.path.basename):
            with open(b, "rb") as f:
                add(z, records, f"{data_dir}/scripts/{os.path.basename(b)}", f.read(), 0o755)
        add(z, records, f"{info_dir}/METADATA", meta, 0o644)
        add(z, records, f"{info_dir}/WHEEL", wheel, 0o644)
        records.append(f"{info_dir}/RECORD,,")
        info = zipfile.ZipInfo(f"{info_dir}/RECORD", date_time=EPOCH)
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, "\n".join(records) + "\n")
    os.replace(path + ".tmp", path)
    print(path)


if __name__ == "__main__":
    sys.exit(main())
