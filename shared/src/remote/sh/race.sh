# slurm-watch --race: one entrant's state, and the cancel of one that lost.
#
# Defines: race_state JOB    prints STATE <Slurm's state>|<reason> (squeue's), else, the job having
#                            left the queue, STATE <state> (scontrol's or sacct's); an empty
#                            state when none knows it
#          race_cancel JOB   scancel JOB, then waits up to 10 s until Slurm no longer has it
#                            pending or running; prints CANCELLED <its state then>
# shellcheck disable=SC2317 # a script that includes this file may not call it
race_state() {
  rs=$(squeue -h -j "$1" -o '%T|%r' 2>/dev/null | head -n 1)
  [ -n "$rs" ] || rs=$(scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p' | head -n 1)
  [ -n "$rs" ] || rs=$(sacct -X -n -P -j "$1" -o State 2>/dev/null | head -n 1 | cut -d' ' -f1)
  printf 'STATE %s\n' "$rs"
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
race_cancel() {
  scancel "$1" 2>/dev/null
  rc_t=0
  while [ "$rc_t" -lt 10 ]; do
    case $(squeue -h -j "$1" -o '%T' 2>/dev/null | head -n 1) in
      PENDING | RUNNING | CONFIGURING | REQUEUED | SUSPENDED) sleep 1; rc_t=$((rc_t + 1)) ;;
      *) break ;;
    esac
  done
  printf 'CANCELLED %s\n' "$(squeue -h -j "$1" -o '%T' 2>/dev/null | head -n 1)"
}
