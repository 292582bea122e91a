# slurm-sync-tracked when this machine's last sync into the clone was this very snapshot: is the
# clone still as that sync left it? One execution; nothing is fetched, checked out or stashed
# (anything else and the sync goes on as usual, which handles it).
#
# Expects: repo (the clone), snapshot (the commit), work (the work directory), assigned before
#          this file; cluster_changes from clone-changes.sh; commit_of from head-of.sh; the
#          clone's lock taken; the
#          positional parameters: PATH COMMIT of each initialised submodule.
# Prints:  one line: "UNCHANGED" when HEAD is the snapshot with no cluster-side change and each
#          submodule is at its commit with no tracked edit (the work directory made if missing);
#          else "CHANGED <what>".
# Sets:    look (unchanged|changed), for a second part in the same execution
#          (tracked-continue.sh).
: "${repo:?}" "${snapshot:?}" "${work:?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
sub_heads() { # PATH COMMIT ...: moved, the first submodule not at its commit (read from files)
  moved=''
  while [ "$#" -ge 2 ]; do
    commit_of "$repo/$1"
    # shellcheck disable=SC2154 # at is set by commit_of (head-of.sh)
    if [ "$at" != "$2" ]; then moved="submodule $1 at ${at:-none}"; return; fi
    shift 2
  done
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
sub_edits() { # PATH COMMIT ...: each submodule with a tracked edit, all looked at at once
  while [ "$#" -ge 2 ]; do
    (if [ -n "$(git -C "$repo/$1" status --porcelain --untracked-files=no --ignore-submodules=all 2>/dev/null)" ]; then echo "submodule $1 edited"; fi) &
    shift 2
  done
  wait
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
unchanged() {
  cd -- "$repo" 2>/dev/null || { echo "CHANGED no clone at $repo"; return; }
  commit_of .
  if [ "$at" != "$snapshot" ]; then echo "CHANGED HEAD ${at:-none}"; return; fi
  sub_heads "$@"
  if [ -n "$moved" ]; then echo "CHANGED $moved"; return; fi
  # The clone's own status and each submodule's, side by side (a login node has cores; one
  # after the other they took twice as long): the first change any of them found.
  changed=$(cluster_changes & sub_edits "$@"; wait)
  if [ -n "$changed" ]; then
    nl='
'
    echo "CHANGED ${changed%%"$nl"*}"
    return
  fi
  [ -d "$work" ] || mkdir -p -- "$work" || { echo "CHANGED no work directory $work"; return; }
  look=unchanged
  echo UNCHANGED
}
# shellcheck disable=SC2034 # read by the second part (tracked-after-look.sh)
look=changed
unchanged "$@"
