# Hang forensics, on one node of a running job (one task per node of a step started with
# --overlap, so it runs beside the job's own tasks): for every process of the job's tasks on this
# node (found by SLURM_JOB_ID and SLURMD_NODENAME in its environment, this step's own left out),
# its rank, state, kernel wait channel, sockets, the world size and master address it was given,
# and the Python stack of every thread where it is Python (py-spy dump); the node's GPU state
# where nvidia-smi exists; whether each master address resolves here. Reads only the person's
# own processes; every call is bounded in time.
#
# Expects: job (the job id), pyspy_timeout (seconds for one py-spy dump)
# Prints:  @@node NODE
#          @@missing WHAT                 (py-spy not found on this node, ...)
#          @@gpu LINE                     (nvidia-smi's index, utilization, memory used)
#          @@proc PID RANK STEP STATE WCHAN SOCKETS   (RANK, STEP: - when unset)
#          @@cmd COMMAND LINE
#          @@env WORLD_SIZE=N | MASTER_ADDR=HOST | MASTER_PORT=N | SLURM_NTASKS=N
#          @@stack (then py-spy's dump, lines as they are, until @@end)
#          @@end
#          @@resolve HOST ok|fail
: "${job:?}" "${pyspy_timeout:?}"
node=${SLURMD_NODENAME:-$(hostname)}
self_step=${SLURM_STEP_ID:--}
echo "@@node $node"
# shellcheck disable=SC2317 # a script that includes this file may not call it
bounded() { # SECONDS COMMAND...: the command, cut after SECONDS where `timeout` exists
  if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi
}
# On PATH, where `pip install --user` puts it, or where install_py_spy put it.
pyspy=$(command -v py-spy 2>/dev/null)
for p in "$HOME/.local/bin/py-spy" "$HOME/.cache/slurm-tools/py-spy/bin/py-spy"; do
  if [ -z "$pyspy" ] && [ -x "$p" ]; then pyspy=$p; fi
done
[ -n "$pyspy" ] || echo "@@missing py-spy (no Python stacks: install it with \`python3 -m pip install --user py-spy\`, or set install_py_spy)"
if command -v nvidia-smi >/dev/null 2>&1; then
  bounded 10 nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader 2>&1 | sed 's/^/@@gpu /'
fi
masters=''
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  # Another user's process cannot be read: only the person's own are.
  env=$(tr '\0' '\n' <"$d/environ" 2>/dev/null) || continue
  case $env in *"SLURM_JOB_ID=$job"*) ;; *) continue ;; esac
  printf '%s\n' "$env" | grep -qx "SLURM_JOB_ID=$job" || continue
  printf '%s\n' "$env" | grep -qx "SLURMD_NODENAME=$node" || continue
  step=$(printf '%s\n' "$env" | sed -n 's/^SLURM_STEP_ID=//p' | head -n 1)
  [ "${step:--}" = "$self_step" ] && continue
  rank=$(printf '%s\n' "$env" | sed -n 's/^RANK=//p' | head -n 1)
  [ -n "$rank" ] || rank=$(printf '%s\n' "$env" | sed -n 's/^SLURM_PROCID=//p' | head -n 1)
  state=$(sed -n 's/^State:[[:space:]]*\([A-Za-z]\).*/\1/p' "$d/status" 2>/dev/null)
  wchan=$(cat "$d/wchan" 2>/dev/null)
  socks=0
  for f in "$d"/fd/*; do
    case $(readlink "$f" 2>/dev/null) in socket:*) socks=$((socks + 1)) ;; esac
  done
  echo "@@proc $pid ${rank:--} ${step:--} ${state:-?} ${wchan:--} ${socks:-0}"
  echo "@@cmd $(tr '\0' ' ' <"$d/cmdline" 2>/dev/null | cut -c 1-300)"
  printf '%s\n' "$env" | grep -E '^(WORLD_SIZE|MASTER_ADDR|MASTER_PORT|SLURM_NTASKS)=' | sed 's/^/@@env /'
  m=$(printf '%s\n' "$env" | sed -n 's/^MASTER_ADDR=//p' | head -n 1)
  if [ -n "$m" ]; then
    case " $masters " in *" $m "*) ;; *) masters="$masters $m" ;; esac
  fi
  comm=$(cat "$d/comm" 2>/dev/null)
  case $comm in
    python*)
      if [ -n "$pyspy" ]; then
        echo "@@stack"
        bounded "$pyspy_timeout" "$pyspy" dump --pid "$pid" 2>&1 | head -n 200
        echo "@@end"
      fi ;;
  esac
done
for m in $masters; do
  if getent hosts "$m" >/dev/null 2>&1; then echo "@@resolve $m ok"; else echo "@@resolve $m fail"; fi
done
