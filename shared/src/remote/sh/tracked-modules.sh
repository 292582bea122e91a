# The tracked sync's submodules in the remote clone: `ensure_module` gives a submodule a
# repository in git's layout before its snapshot arrives (pushed into it, or as a pack that
# `sub_unpack` reads from stdin in the same execution); `sub_checkout` checks the commit out
# (cluster-side edits stashed, our own untracked files making way).
#
# Expects: repo, temp, ours, clean_known, E_SUBMODULE, E_STASH; detached_head, commit_of
#          (head-of.sh).
# Defines: ensure_module PATH MODULE_DIR; has_commit PATH COMMIT; sub_unpack PATH SIZE COMMIT;
#          sub_checkout PATH COMMIT NAME
#          URL PARENT [clean] (clean, with clean_known=yes: the look that ran just before, under
#          the same lock, found it at its recorded commit with no edit: tracked-continue.sh; it
#          is not looked at again).
# Prints:  SUB_CREATED <path>            a repository made for the submodule
#          SUB_MISSING <path>            its repository lacks the snapshot commit (to be sent)
#          SUB_BASE <sha> <path>         ... and its HEAD is at <sha> (what is sent may leave out
#                                        what <sha> reaches)
#          SUB_STASHED <sha> <path>      its cluster-side edits were stashed
#          SUB_HEAD <sha> <path>         its HEAD after the checkout
#          SUB_FAILED <path>             it failed there (then exits)
: "${repo?}" "${temp?}" "${ours?}" "${clean_known?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
ensure_module() { # PATH MODULE_DIR: a repository for the submodule at PATH, in git's layout
  wt="$repo/$1"
  if [ -e "$wt/.git" ]; then return 0; fi
  gd="$repo/.git/$2"
  mkdir -p -- "$wt" "$(dirname -- "$gd")" || { echo "SUB_FAILED $1"; exit "$E_SUBMODULE"; }
  if [ -d "$gd" ]; then
    printf 'gitdir: %s\n' "$gd" > "$wt/.git" || { echo "SUB_FAILED $1"; exit "$E_SUBMODULE"; }
  else
    git init -q --separate-git-dir="$gd" "$wt" >&2 || { echo "SUB_FAILED $1"; exit "$E_SUBMODULE"; }
  fi
  git --git-dir="$gd" config core.worktree "$wt"
  echo "SUB_CREATED $1"
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
has_commit() { # PATH COMMIT: whether the submodule's repository has COMMIT (said when not)
  # shellcheck disable=SC2154 # head_at is set by detached_head (head-of.sh)
  if detached_head "$repo/$1" && [ "$head_at" = "$2" ]; then return 0; fi
  git -C "$repo/$1" cat-file -e "$2^{commit}" 2>/dev/null && return 0
  echo "SUB_MISSING $1"
  # A repository made now has no HEAD to read.
  if detached_head "$repo/$1"; then echo "SUB_BASE $head_at $1"; fi
  return 1
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
sub_unpack() { # PATH SIZE COMMIT: the next SIZE bytes of stdin, a pack, into the submodule's repository
  # A repository that has COMMIT already has no use for it: read and dropped (a first sync
  # sends every submodule's pack before the clone has said which it lacks).
  if [ -n "$3" ] && git -C "$repo/$1" cat-file -e "$3^{commit}" 2>/dev/null; then
    sub_bytes "$2" >/dev/null
    return 0
  fi
  sub_bytes "$2" | git -C "$repo/$1" index-pack --stdin >/dev/null || { echo "SUB_FAILED $1"; exit "$E_SUBMODULE"; }
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
sub_bytes() { # SIZE: exactly SIZE bytes of stdin (what follows is the next submodule's pack)
  # `iflag=fullblock` is GNU and busybox dd's, one byte at a time the fallback of an older one.
  dd bs="$1" count=1 iflag=fullblock 2>/dev/null || dd bs=1 count="$1" 2>/dev/null
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
sub_checkout() { # PATH COMMIT NAME URL PARENT [clean]
  wt="$repo/$1"
  sub_clean=no
  if [ "${6:-}" = clean ] && [ "$clean_known" = yes ]; then sub_clean=yes; fi
  cd -- "$wt" 2>/dev/null || { echo "SUB_FAILED $1"; exit "$E_SUBMODULE"; }
  # Already there with no cluster-side edit (a re-sync that changed another part): one look (the
  # sync that checked it out said the superproject knows it).
  commit_of "$wt"
  # shellcheck disable=SC2154 # at is set by commit_of (head-of.sh)
  if [ "$at" = "$2" ] && { [ "$sub_clean" = yes ] || [ -z "$(git status --porcelain --untracked-files=no --ignore-submodules=all 2>/dev/null)" ]; }; then
    echo "SUB_HEAD $2 $1"
    return 0
  fi
  # Cluster-side edits of tracked files are stashed (reported, never lost); untracked files stay.
  if [ "$sub_clean" != yes ] && [ -n "$(git status --porcelain --untracked-files=no --ignore-submodules=all 2>/dev/null)" ]; then
    git stash save -q "auto-stash before remote sync $temp" >&2 || { echo "SUB_FAILED $1"; exit "$E_STASH"; }
    echo "SUB_STASHED $(git rev-parse -q --verify refs/stash) $1"
  fi
  # Our own untracked files (an earlier untracked sync's) where the new commit has a tracked
  # file make way for it; anything else in the way stops the checkout, named by git.
  if [ -f "$repo/$ours" ]; then
    LC_ALL=C awk -v p="$1/" 'BEGIN { n = length(p) } { l = substr($0, index($0, "	") + 1); if (substr(l, 1, n) == p) print substr(l, n + 1) }' "$repo/$ours" |
    while IFS= read -r f; do
      if { [ -e "$f" ] || [ -L "$f" ]; } && git cat-file -e "$2:$f" 2>/dev/null; then rm -f -- "$f"; fi
    done
  fi
  git checkout -q --detach "$2" >&2 || { echo "SUB_FAILED $1"; exit "$E_SUBMODULE"; }
  # The superproject knows it as initialised, as `git submodule init` would have it.
  if [ -n "$4" ]; then git -C "$repo/$5" config "submodule.$3.url" "$4" 2>/dev/null; fi
  echo "SUB_HEAD $(git rev-parse HEAD) $1"
}
