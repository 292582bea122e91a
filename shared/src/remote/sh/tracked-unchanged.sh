# slurm-sync-tracked when this machine's last sync into the clone was this very snapshot: is the
# clone still as that sync left it? One execution; nothing is fetched, checked out or stashed
# (anything else and the sync goes on as usual, which handles it).
#
# Expects: repo (the clone), snapshot (the commit), work (the work directory), assigned before
#          this file; cluster_changes from clone-changes.sh; the clone's lock taken; the
#          positional parameters: PATH COMMIT of each initialised submodule.
# Prints:  one line: "UNCHANGED" when HEAD is the snapshot with no cluster-side change and each
#          submodule is at its commit with no tracked edit (the work directory made if missing);
#          else "CHANGED <what>".
: "${repo:?}" "${snapshot:?}" "${work:?}"
# head_at: the commit checked out in the checkout DIR, read from its files with no process
# started (its .git directory, or the "gitdir:" file of a submodule; then HEAD, and the branch's
# own file when HEAD names one); fails where that is not a plain commit id (a packed branch, a
# worktree's shared refs: then git is asked).
# shellcheck disable=SC2317 # a script that includes this file may not call it
detached_head() { # DIR
  if [ -d "$1/.git" ]; then
    head_gitdir=$1/.git
  else
    IFS= read -r head_gitdir <"$1/.git" 2>/dev/null || return 1
    head_gitdir=${head_gitdir#gitdir: }
    case $head_gitdir in /*) ;; *) head_gitdir=$1/$head_gitdir ;; esac
  fi
  [ ! -f "$head_gitdir/commondir" ] || return 1
  IFS= read -r head_at <"$head_gitdir/HEAD" 2>/dev/null || return 1
  case $head_at in
    'ref: refs/heads/'*) IFS= read -r head_at <"$head_gitdir/${head_at#ref: }" 2>/dev/null || return 1 ;;
  esac
  case $head_at in '' | *[!0-9a-f]*) return 1 ;; esac
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
commit_of() { # DIR: sets at
  if detached_head "$1"; then at=$head_at; else at=$(git -C "$1" rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null); fi
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
unchanged() {
  cd -- "$repo" 2>/dev/null || { echo "CHANGED no clone at $repo"; return; }
  commit_of .
  if [ "$at" != "$snapshot" ]; then echo "CHANGED HEAD ${at:-none}"; return; fi
  changed=$(cluster_changes)
  if [ -n "$changed" ]; then echo "CHANGED $changed"; return; fi
  while [ "$#" -ge 2 ]; do
    commit_of "$repo/$1"
    if [ "$at" != "$2" ]; then echo "CHANGED submodule $1 at ${at:-none}"; return; fi
    if [ -n "$(git -C "$repo/$1" status --porcelain --untracked-files=no --ignore-submodules=all 2>/dev/null)" ]; then
      echo "CHANGED submodule $1 edited"
      return
    fi
    shift 2
  done
  [ -d "$work" ] || mkdir -p -- "$work" || { echo "CHANGED no work directory $work"; return; }
  echo UNCHANGED
}
unchanged "$@"
