# Hang forensics for a running job, from the login node: one step with --overlap (beside the
# job's own tasks, not waiting for them), one task per node of the job, each running the
# collector (forensics-collect.sh with its values); the whole collection cut after `limit`
# seconds, so it never holds up the cancel that follows.
#
# Expects: job, limit (seconds), collector (the collector's script text), install (1: where
#          py-spy is not on the login node's PATH nor in ~/.local/bin or the tools' cache, install
#          it first with pip --target into ~/.cache/slurm-tools/py-spy, which the nodes see
#          through the shared home: the login node reaches a package index where compute nodes
#          often cannot; under a lock, cut at 10 s)
# Prints:  @@installed WHAT / @@install-failed WHY (install=1 only), then
#          the collector's lines, each prefixed by srun's task label (`N: `), then
#          @@cut LIMIT         the limit cut the collection short
#          @@status CODE       srun's exit code
#          @@error WHAT        nothing was collected (the job left the queue)
: "${job:?}" "${limit:?}" "${collector:?}" "${install:?}"
cached="$HOME/.cache/slurm-tools/py-spy"
if [ "$install" = 1 ] && ! command -v py-spy >/dev/null 2>&1 \
    && [ ! -x "$HOME/.local/bin/py-spy" ] && [ ! -x "$cached/bin/py-spy" ]; then
  mkdir -p -- "${cached%/*}" 2>/dev/null
  # A lock left by a killed install (older than two minutes) is removed.
  if [ -n "$(find "$cached.lock" -maxdepth 0 -mmin +2 2>/dev/null)" ]; then rm -rf -- "$cached.lock"; fi
  if mkdir -- "$cached.lock" 2>/dev/null; then
    if command -v timeout >/dev/null 2>&1; then t="timeout 10"; else t=''; fi
    # shellcheck disable=SC2086
    why=$($t python3 -m pip install --quiet --disable-pip-version-check --target "$cached" py-spy 2>&1 | tail -n 1)
    rmdir -- "$cached.lock" 2>/dev/null
  else
    i=0
    while [ "$i" -lt 10 ] && [ -d "$cached.lock" ]; do sleep 1; i=$((i + 1)); done
    why="another collection was installing it"
  fi
  if [ -x "$cached/bin/py-spy" ]; then echo "@@installed py-spy into $cached"
  else echo "@@install-failed py-spy could not be installed with pip on the login node (${why:-no reason given})"; fi
fi
n=$(squeue -h -j "$job" -o %D 2>/dev/null | head -n 1)
if [ -z "$n" ]; then echo "@@error job $job is no longer in the queue"; exit 0; fi
ov=''
if srun --help 2>&1 | grep -q -- '--overlap'; then ov=--overlap; fi
cut=''
if command -v timeout >/dev/null 2>&1; then cut="timeout -k 5 $limit"; fi
# shellcheck disable=SC2086
$cut srun --jobid="$job" $ov --nodes="$n" --ntasks-per-node=1 --kill-on-bad-exit=0 --label --quiet \
  --job-name=slurm-tools-forensics /bin/sh -c "$collector" 2>&1
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "@@cut $limit"; fi
echo "@@status $rc"
