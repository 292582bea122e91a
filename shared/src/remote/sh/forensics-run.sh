# Hang forensics for a running job, from the login node: one step with --overlap (beside the
# job's own tasks, not waiting for them), one task per node of the job, each running the
# collector (forensics-collect.sh with its values); the whole collection cut after `limit`
# seconds, so it never holds up the cancel that follows.
#
# Expects: job, limit (seconds), collector (the collector's script text)
# Prints:  the collector's lines, each prefixed by srun's task label (`N: `), then
#          @@cut LIMIT         the limit cut the collection short
#          @@status CODE       srun's exit code
#          @@error WHAT        nothing was collected (the job left the queue)
: "${job:?}" "${limit:?}" "${collector:?}"
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
