# Cluster-side changes in the remote clone: `cluster_changes` prints the first line of
# `git status --porcelain` in the current directory (the clone) that is a change made on the
# cluster: a tracked edit, or an untracked file that no untracked sync put there (its manifest,
# `ours`, lists the files it put, quoted as git quotes them). Submodules are looked at one by
# one elsewhere. Prints nothing when there is none.
#
# Expects: ours (the untracked sync's manifest, relative to the clone).
: "${ours:?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
cluster_changes() {
  git -c core.quotePath=false -c core.untrackedCache=true status --porcelain --untracked-files=all --ignore-submodules=all 2>/dev/null | LC_ALL=C awk -v ours="$ours" '
    BEGIN { while ((getline l < ours) > 0) { i = index(l, "\t"); if (i) o[substr(l, i + 1)] = 1 } }
    /^\?\? / { if (substr($0, 4) in o) next }
    { print; exit }'
}
