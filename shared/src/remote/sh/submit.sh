# slurm-submit's upload and submission, in one script, idempotent per tag: under the tag's lock it
# first looks for a job Slurm already has with the tag (an earlier attempt whose answer was lost,
# or the run a rerun resumes) and only submits when there is none. A fresh tag can only be in the
# job id file (written under the same lock by a concurrent run on the same input), so squeue is
# asked only when thorough=yes (a retry or a resumed run).
#
# Expects: dir (the upload directory), state (the state directory), repo (the clone), token (the
#          tag), jobid_file, thorough (yes|no), tree and trees (job-tree.sh: make_tree,
#          prune_trees), nap, take_lock and release_lock (lock.sh), tmux_start and has_session
#          (tmux.sh, for submit_in_tmux), E_UPLOAD_DIR, E_EXTRACT, E_NO_CHECKOUT, E_TREE,
#          E_SUBMIT, E_NO_TMUX, E_TMUX_START, E_SRUN_EXITED, E_NO_JOB_ID.
# Defines: find_job (the job's id, from the file the job writes when it starts, else from squeue
#          by the tag in its --comment or by its working directory; empty when Slurm does not
#          have it yet), submit_prepare (the files from the tar stream on stdin, the job's own
#          code tree; exits 0 when the job exists already), submit_batch WORD... (sbatch's
#          command line), submit_in_tmux SESSION EXIT_FILE SRUN_LOG COMMAND (srun held in tmux).
# Prints:  RESUMED                       the job (or its tmux session) exists already
#          TMUX <session>                the tmux session that holds srun
#          JOBID <id>                    the job's id (then exits 0)
#          SRUN_EXIT <code>              srun ended before a job appeared (then exits)
: "${dir?}" "${state?}" "${repo?}" "${token?}" "${jobid_file?}" "${thorough?}" "${tree?}" "${trees?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
find_job() {
  if [ -s "$jobid_file" ]; then head -n 1 "$jobid_file"; return; fi
  # By the tag in the comment, or by the job's working directory, its own code tree (unique per
  # tag): a site's job_submit policy may clear or rewrite the comment.
  squeue -h --states=all -u "$(id -un)" -o '%i|%Z|%k' 2>/dev/null | awk -F'|' -v t="$token" -v d="$tree" '$2 == d || index($0, t) { print $1; exit }'
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
submit_prepare() {
  mkdir -p -- "$dir" "$state" "$dir/.slurm-tools" || exit "$E_UPLOAD_DIR"
  take_lock
  trap release_lock EXIT
  id=
  if [ "$thorough" = yes ] || [ -s "$jobid_file" ]; then id=$(find_job); fi
  if [ -n "$id" ]; then cat >/dev/null; echo "RESUMED"; echo "JOBID $id"; exit 0; fi
  tar -x --no-same-owner -f - -C "$dir" || exit "$E_EXTRACT"
  cd -- "$repo" || exit "$E_NO_CHECKOUT"
  make_tree || exit "$E_TREE"
  prune_trees
  cd -- "$tree" || exit "$E_TREE"
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
submit_batch() { # WORD...: sbatch's command line
  out=$("$@" 2>"$state/$token.submit.err") || { cat "$state/$token.submit.err" >&2; exit "$E_SUBMIT"; }
  id=${out%%;*}
  printf '%s\n' "$id" >"$jobid_file"
  printf '%s\n' "$id" >"$trees/$token.job"
  echo "JOBID $id"
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
submit_in_tmux() { # SESSION EXIT_FILE SRUN_LOG COMMAND
  session=$1 exit_file=$2 srun_log=$3
  command -v tmux >/dev/null 2>&1 || exit "$E_NO_TMUX"
  if has_session "$session"; then
    echo "RESUMED"
  else
    rm -f -- "$exit_file" "$srun_log"
    tmux_start "$session" "$4" || exit "$E_TMUX_START"
  fi
  echo "TMUX $session"
  # A minute, by the clock: a sleep without fractions (not GNU) naps a whole second instead.
  i=0 until=$(( $(date +%s) + 60 ))
  while [ "$(date +%s)" -lt "$until" ]; do
    id=$(find_job)
    if [ -n "$id" ]; then printf '%s\n' "$id" >"$trees/$token.job"; echo "JOBID $id"; exit 0; fi
    if [ -s "$exit_file" ]; then echo "SRUN_EXIT $(cat "$exit_file")"; cat "$srun_log" >&2; exit "$E_SRUN_EXITED"; fi
    i=$((i + 1))
    if [ "$i" -lt 20 ]; then nap 0.1; else nap 1; fi
  done
  exit "$E_NO_JOB_ID"
}
