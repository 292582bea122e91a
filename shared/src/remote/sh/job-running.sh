# Before reaching into a job (slurm-attach, slurm-forward, slurm-alloc exec): it must run, and
# the node asked for must be one of its.
#
# Expects: job, E_PENDING, E_GONE, E_NOT_RUNNING.
# Defines: check_running (exits unless the job runs; sets nodelist to its nodes),
#          pick_node [NODE] (after check_running: sets node to NODE when it is one of the job's,
#          else to the job's first).
# Prints:  on stderr, lines a passed-through stderr leaves out (process::Cmd::output_through):
#          @@slurm-tools PENDING <expected start>, @@slurm-tools STATE <state>;
#          on stdout: NOT_IN_JOB <the job's nodes> (NODE is not one of them; then exits 0).
: "${job?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
check_running() {
  st=$(squeue -h -j "$job" -o '%T|%S|%N' 2>/dev/null | head -n 1)
  case "$st" in
    RUNNING*) ;;
    PENDING*) st=${st#*|}; echo "@@slurm-tools PENDING ${st%%|*}" >&2; exit "$E_PENDING" ;;
    # Ended: COMPLETING is Slurm cleaning up its nodes after the job.
    ""|COMPLETING*) exit "$E_GONE" ;;
    *) echo "@@slurm-tools STATE ${st%%|*}" >&2; exit "$E_NOT_RUNNING" ;;
  esac
  nodelist=${st##*|}
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
pick_node() {
  nodes=$(scontrol show hostnames "$nodelist" 2>/dev/null); [ -n "$nodes" ] || nodes=$nodelist
  if [ -n "${1:-}" ]; then
    printf '%s\n' "$nodes" | grep -Fqx -- "$1" || { echo "NOT_IN_JOB $(printf '%s\n' "$nodes" | tr '\n' ' ')"; exit 0; }
    node=$1
  else
    node=$(printf '%s\n' "$nodes" | head -n 1)
  fi
}
