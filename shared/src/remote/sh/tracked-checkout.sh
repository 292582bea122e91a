# The tracked sync's checkout in the remote clone, under its lock: cluster-side changes stashed
# (never lost; the untracked sync's own files excluded), the snapshot's branch checked out from
# origin or from the ref it was pushed to, the refresh paths (the positional parameters) checked
# out again from HEAD, the job's work directory made.
#
# Expects: repo, via (origin|direct|delta), url, temp (the snapshot's branch), snapshot (with
#          delta: the commit, unpacked before), work, lfs_oids (may be
#          empty), ours, ours_exclude, ours_aside (the untracked sync's manifest files), the
#          refresh paths as "$@", clean_known (yes: the look that ran just before, under the
#          same lock, found no cluster-side change: tracked-continue.sh), created (yes when
#          tracked-clone.sh made the clone in this execution; may be unset), E_ENTER, E_LFS,
#          E_STASH, E_FETCH, E_CHECKOUT, E_REFRESH, E_MKDIR; cluster_changes
#          (clone-changes.sh); commit_of (head-of.sh).
# Prints:  LFS_NO_TOOL                   LFS files and no git-lfs on the cluster (then exits)
#          STASHED <sha> <message>       cluster-side changes were stashed there
#          ORIGIN_DIFFERS <origin>       the clone's origin is not where the snapshot went
#          REFRESHED <path>              a refresh path checked out again
#          HEAD <sha>                    the clone's HEAD after the checkout
: "${repo?}" "${via?}" "${url?}" "${temp?}" "${work?}" "${lfs_oids?}" "${clean_known?}" "${ours?}" "${ours_exclude?}" "${ours_aside?}"
cd -- "$repo" || exit "$E_ENTER"
if [ -n "$lfs_oids" ] && ! git lfs version >/dev/null 2>&1; then echo "LFS_NO_TOOL"; exit "$E_LFS"; fi
[ -d .git/info ] || mkdir -p .git/info
grep -qx '/work_dirs/' .git/info/exclude 2>/dev/null || echo '/work_dirs/' >> .git/info/exclude
# Cluster-side changes (clone-changes.sh); submodules are looked at one by one, later. Ours are
# never stashed: while stashing, they are excluded through the patterns the untracked sync left.
# A clone made in this execution (created=yes, tracked-clone.sh) has none, and no working tree
# yet to look at.
if [ "$clean_known" = yes ] || [ "${created:-no}" = yes ]; then dirty=''; else dirty=$(cluster_changes); fi
if [ -n "$dirty" ]; then
  saved=.git/info/exclude.slurm-tools-saved
  cp .git/info/exclude "$saved" 2>/dev/null || : > "$saved"
  if [ -f "$ours_exclude" ]; then cat "$ours_exclude" >> .git/info/exclude; fi
  # Ours that no pattern can name (a newline in the name) wait aside in .git meanwhile (in a
  # subshell: its positional parameters are not the refresh paths').
  (
    set --
    # shellcheck source=/dev/null
    if [ -f "$ours_aside" ]; then . "./$ours_aside"; fi
    i=0
    for p do i=$((i + 1)); if [ -e "$p" ] || [ -L "$p" ]; then mv -- "$p" ".git/slurm-tools/aside-$i"; fi; done
    # `stash save`, not `stash push` (git 2.13+): the git of an old login node has only `save`.
    git stash save -u -q "auto-stash before remote sync $temp" >&2
    rc=$?
    i=0
    for p do i=$((i + 1)); if [ -e ".git/slurm-tools/aside-$i" ] || [ -L ".git/slurm-tools/aside-$i" ]; then mv -- ".git/slurm-tools/aside-$i" "$p"; fi; done
    exit "$rc"
  )
  rc=$?
  cat "$saved" > .git/info/exclude && rm -f "$saved"
  [ "$rc" = 0 ] || exit "$E_STASH"
  echo "STASHED $(git rev-parse -q --verify refs/stash) auto-stash before remote sync $temp"
fi
if [ "$via" = origin ]; then
  # `config --get`, not `remote get-url` (git 2.7+).
  origin=$(git config --get remote.origin.url 2>/dev/null)
  if [ "$origin" = "$url" ]; then
    # Never into submodules: their repositories here get their commits over ssh, not from their
    # URLs (often unreachable from a cluster). A clone made an instant ago has the branch.
    if [ "${created:-no}" != yes ]; then
      git fetch -q --no-recurse-submodules --prune origin >&2 || exit "$E_FETCH"
    fi
  else
    # The clone's origin is not where the snapshot was pushed: fetch the branch from there.
    echo "ORIGIN_DIFFERS $origin"
    git fetch -q --no-recurse-submodules -- "$url" "+refs/heads/$temp:refs/remotes/origin/$temp" >&2 || exit "$E_FETCH"
  fi
  git checkout -q -f -B "$temp" "refs/remotes/origin/$temp" >&2 || exit "$E_CHECKOUT"
elif [ "$via" = delta ]; then
  # Its objects were unpacked here (tracked-delta.sh).
  # shellcheck disable=SC2154 # snapshot is assigned by the delta script
  git checkout -q -f -B "$temp" "$snapshot" >&2 || exit "$E_CHECKOUT"
else
  # Pushed to a ref of ours (forced), so a second sync within the same second (the same branch
  # name, now checked out here) still lands; the branch is (re)set from it.
  git checkout -q -f -B "$temp" "refs/slurm-tools/incoming/$temp" >&2 || exit "$E_CHECKOUT"
  git update-ref -d "refs/slurm-tools/incoming/$temp" 2>/dev/null
fi
for p do
  if git cat-file -e "HEAD:$p" 2>/dev/null; then
    rm -rf -- "$p" && git checkout -q HEAD -- "$p" >&2 || exit "$E_REFRESH"
    echo "REFRESHED $p"
    # Untracked files of ours under it went with it: the next untracked sync sends them all.
    if [ -f "$ours" ] && LC_ALL=C awk -v p="$p/" 'index(l = substr($0, index($0, "\t") + 1), p) == 1 || index(l, "\"" p) == 1 || p ~ /["\\ ]/ { f = 1 } END { exit !f }' "$ours"; then
      rm -f -- "$ours"
    fi
  fi
done
[ -d "$work" ] || mkdir -p -- "$work" || exit "$E_MKDIR"
commit_of .
# shellcheck disable=SC2154 # at is set by commit_of (head-of.sh)
echo "HEAD $at"
