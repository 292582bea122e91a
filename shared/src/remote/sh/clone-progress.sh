# A first sync's clone, for a person watching: while the cluster clones origin, a line every
# 2 s with how much has arrived, and one when it is done. The lines go to stderr behind the
# marker `@@slurm-tools-progress ` (shared/src/support/process.rs PROGRESS): the tool shows those lines
# and only those as they come.
#
# Expects: progress (yes: say it; anything else: say nothing, define the same functions).
# Defines: clone_progress_start DIR, clone_progress_stop DIR
# Prints (stderr, only with progress=yes):
#   @@slurm-tools-progress slurm-sync-tracked: cloning origin into DIR on the cluster ...
#   @@slurm-tools-progress slurm-sync-tracked: cloning: N MB so far (S s)
#   @@slurm-tools-progress slurm-sync-tracked: cloned origin: N MB in S s
# (The one tool that clones: its name leads each line, as the contract says of progress.)
: "${progress:?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
clone_mb() { du -sk -- "$1" 2>/dev/null | awk '{ printf "%.1f", $1 / 1024 }'; }
# shellcheck disable=SC2317 # a script that includes this file may not call it
clone_progress_start() {
  clone_started=$(date +%s)
  clone_watcher=
  [ "$progress" = yes ] || return 0
  printf '@@slurm-tools-progress slurm-sync-tracked: cloning origin into %s on the cluster (a first sync brings the history)\n' "$1" >&2
  # The watcher's sleep holds neither of the session's output descriptors: once the watcher is
  # stopped, nothing keeps the ssh session open.
  ( while sleep 2 >/dev/null 2>&1; do
      printf '@@slurm-tools-progress slurm-sync-tracked: cloning: %s MB so far (%s s)\n' "$(clone_mb "$1")" "$(( $(date +%s) - clone_started ))" >&2
    done ) &
  clone_watcher=$!
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
clone_progress_stop() {
  [ "$progress" = yes ] || return 0
  if [ -n "$clone_watcher" ]; then
    kill "$clone_watcher" 2>/dev/null
    wait "$clone_watcher" 2>/dev/null
  fi
  printf '@@slurm-tools-progress slurm-sync-tracked: cloned origin: %s MB in %s s\n' "$(clone_mb "$1")" "$(( $(date +%s) - clone_started ))" >&2
}
