# The commit a checkout has, read from its files where that is enough (no process started).
#
# Defines: detached_head DIR (sets head_at; fails where git must be asked), commit_of DIR (sets
#          at: the commit, or empty).
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
  # shellcheck disable=SC2034 # at is read by the scripts that include this file
  if detached_head "$1"; then at=$head_at; else at=$(git -C "$1" rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null); fi
}
