# slurm-alloc down on Apptainer: the allocation's instance stopped on every node, and its overlay
# removed (apptainer-run.sh names it ${TMPDIR:-/tmp}/slurm-tools-<uid>-<instance>).
#
# Defines: stop_instances JOB NODES INSTANCE   one step on each of the NODES nodes of JOB
# Expects: ov (srun's --overlap where it has it)
# Prints:  INSTANCE_STOPPED <instance> on <node>   for each node where it was running
: "${ov?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
stop_instances() {
  # shellcheck disable=SC2016,SC2086
  srun $ov --jobid="$1" --nodes="$2" --ntasks-per-node=1 sh -c 'for p in apptainer singularity; do command -v "$p" >/dev/null 2>&1 || continue; "$p" instance list "$1" 2>/dev/null | grep -q "^$1[[:space:]]" && "$p" --quiet instance stop "$1" >/dev/null 2>&1 && echo "INSTANCE_STOPPED $1 on $(hostname)"; rm -rf -- "${TMPDIR:-/tmp}/slurm-tools-$(id -u)-$1"; break; done' sh "$3" 2>/dev/null
}
