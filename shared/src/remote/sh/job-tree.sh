# Each job's own code tree (the edit-sync-run loop), in $trees/<tag>: see the cookbook, "Where
# each job's code lives". Run in the remote clone (the working directory).
#
# Expects: token (this submission's tag: the tree's name), trees (the folder of every tree),
#          tree (this job's tree), commit (the snapshot; empty: the clone's HEAD), warm (the
#          branch's warm build tree), keep (how many finished jobs' trees to keep), is_build
#          (yes/no), manifest and paths0 (the clone's untracked manifest files), and the
#          untracked_store, current_set and copy_listed0 of untracked-store.sh.
# Defines: make_tree: a `git worktree` of the clone at the snapshot commit (a `--shared` clone
#          where git has no worktrees), kept from gc by refs/slurm-tools/trees/<tag>, with the
#          snapshot's submodules (nested too) as real git checkouts at their commits (`--shared`
#          clones of the clone's submodule repositories, registered in their parents), plus the
#          untracked files synced with that snapshot (kept per snapshot by keep_untracked; else
#          those the clone's last untracked sync put there). A run job that follows a build of
#          the same commit also gets that build's outputs (everything untracked or ignored in the
#          warm build tree), copied. A build job's warm tree is created here when new. A
#          tree it could not finish is removed again (so a rerun of the tag makes it anew).
#          prune_trees: removes the trees of all but the newest $keep jobs, never one whose job
#          Slurm still has (one squeue for all), never one whose submission may still be under
#          way (no job id yet and younger than an hour); then says how much disk they use.
# Prints:  NO_SNAPSHOT                the clone is not a git clone: the tree links to it
#          UNTRACKED_FROM <snapshot>  the untracked files are another snapshot's sync's
#          BUILD_OUTPUTS <warm>       the build's outputs were copied in
#          PRUNED <tag>               a finished job's tree was removed
#          TREES_KB <kb>              the disk all trees use
: "${token:?}" "${trees:?}" "${tree:?}" "${warm:?}" "${keep:?}" "${is_build:?}" "${manifest:?}" "${paths0:?}" "${untracked_store:?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
add_tree() { # add_tree DIR COMMIT
  if git worktree list >/dev/null 2>&1; then
    git worktree add -q --detach "$1" "$2" >&2
  else
    git clone -q --shared --no-checkout . "$1" >&2 && (cd -- "$1" && git checkout -q --detach "$2" >&2)
  fi
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
fill_submodules() { # SRC DST COMMIT: COMMIT's submodules (nested too) as git checkouts in DST
  git -C "$1" ls-tree -r "$3" 2>/dev/null | LC_ALL=C awk -F '\t' '$1 ~ /^160000 commit / && $2 !~ /^"/ { split($1, f, " "); print f[3] " " $2 }' |
  while read -r sha path; do
    # A submodule the clone has not checked out (not initialised) stays empty, as it is there.
    git -C "$1/$path" cat-file -e "$sha^{commit}" 2>/dev/null || continue
    # A real checkout at the snapshot's commit, sharing the clone's objects (no second copy of
    # history), its commit kept from gc by a ref in the clone's submodule repository; then
    # registered in its parent, so `git submodule status` shows it initialised and
    # `git submodule update --init --recursive` has nothing to fetch.
    git -C "$1/$path" update-ref "refs/slurm-tools/trees/$token" "$sha" || return 1
    git -c init.defaultBranch=main clone -q --shared --no-checkout -- "$1/$path" "$2/$path" >&2 &&
      git -C "$2/$path" checkout -q --detach "$sha" >&2 || return 1
    git -C "$2" submodule init -q -- "$path" >/dev/null 2>&1
    fill_submodules "$1/$path" "$2/$path" "$sha" || return 1
  done
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
make_tree() {
  [ -e "$tree" ] || [ -L "$tree" ] && return 0
  make_tree_once && return 0
  # Half made: removed, so that a rerun of the same tag makes it again instead of using it.
  if [ -L "$tree" ]; then rm -f -- "$tree"
  elif [ -e "$tree" ]; then git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf -- "$tree"; fi
  rm -f -- "$trees/$token.job"
  return 1
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
make_tree_once() {
  mkdir -p -- "$trees" || return 1
  # Not a git clone (a directory kept up to date some other way): no snapshot to hold, the job
  # runs in it as it is, through a link, and says so.
  if ! git rev-parse --git-dir >/dev/null 2>&1; then
    ln -s -- "$PWD" "$tree" || return 1
    : >"$trees/$token.job"
    echo "NO_SNAPSHOT"
    return 0
  fi
  [ -n "$commit" ] || commit=$(git rev-parse HEAD) || return 1
  git update-ref "refs/slurm-tools/trees/$token" "$commit" || return 1
  add_tree "$tree" "$commit" || return 1
  fill_submodules "$PWD" "$tree" "$commit" || return 1
  : >"$trees/$token.job"
  current_set "$commit"
  if [ -n "$current_set" ] && [ -d "$untracked_store/$current_set" ] && [ -f "$untracked_store/$current_set.paths0" ]; then
    # The untracked files synced with this snapshot, whatever another checkout synced since (a
    # set is never changed, and stays an hour after a newer sync of the snapshot replaced it).
    if [ -s "$untracked_store/$current_set.paths0" ]; then
      copy_listed0 "$untracked_store/$current_set" "$tree" <"$untracked_store/$current_set.paths0" || return 1
    fi
  elif [ -s "$paths0" ]; then
    snap=$(sed -n '1s/.*snapshot=//p' "$manifest" 2>/dev/null)
    [ "$snap" = "$commit" ] || echo "UNTRACKED_FROM ${snap:-unknown}"
    copy_listed0 . "$tree" <"$paths0" || return 1
  fi
  if [ "$is_build" = yes ]; then
    [ -e "$warm" ] || { add_tree "$warm" "$commit" && fill_submodules "$PWD" "$warm" "$commit"; } || return 1
  elif [ -f "$warm.built" ] && [ "$(cat "$warm.built")" = "$commit" ]; then
    (cd -- "$warm" && { git ls-files -z --others --directory --exclude-standard; git ls-files -z --others --ignored --exclude-standard --directory; }) | copy_listed0 "$warm" "$tree" || return 1
    echo "BUILD_OUTPUTS $warm"
  fi
  return 0
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
prune_trees() {
  live=$(squeue -h -u "$(id -un)" -o '%i' 2>/dev/null) || return 0
  n=0 stale=no
  # Newest first; the names are our own tags (no blanks), and ls -t is the portable age order.
  # shellcheck disable=SC2045
  for name in $(ls -1t -- "$trees" 2>/dev/null); do
    case "$name" in build-*|*.job|*.built|*.lock) continue ;; esac
    [ -d "$trees/$name" ] || [ -L "$trees/$name" ] || continue
    n=$((n + 1))
    [ "$n" -gt "$keep" ] || continue
    [ "$name" = "$token" ] && continue
    jid=$(head -n 1 "$trees/$name.job" 2>/dev/null)
    if [ -n "$jid" ]; then
      printf '%s\n' "$live" | grep -qx -- "$jid" && continue
    elif [ -n "$(find "$trees/$name" -maxdepth 0 -mmin -60 2>/dev/null)" ]; then
      continue
    fi
    if [ -L "$trees/$name" ]; then rm -f -- "$trees/$name"
    else git worktree remove --force "$trees/$name" >/dev/null 2>&1 || { rm -rf -- "${trees:?}/$name"; stale=yes; }; fi
    rm -f -- "$trees/$name.job"
    git update-ref -d "refs/slurm-tools/trees/$name" 2>/dev/null
    # shellcheck disable=SC2016
    st_tree=$name git submodule foreach --quiet --recursive 'git update-ref -d "refs/slurm-tools/trees/$st_tree" 2>/dev/null || :' >/dev/null 2>&1
    echo "PRUNED $name"
  done
  # Only when a tree went without git: `git worktree prune` also removes the entry of a tree
  # another submission is adding at this moment (the instant between its mkdir and its first
  # file), whose `git worktree add` then fails (one of eight pipelines at once met it).
  if [ "$stale" = yes ]; then git worktree prune >/dev/null 2>&1; fi
  echo "TREES_KB $(du -sk -- "$trees" 2>/dev/null | cut -f1)"
}
