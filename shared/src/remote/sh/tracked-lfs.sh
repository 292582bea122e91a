# The tracked sync's Git LFS content in the remote clone: `lfs_need` names the objects the clone
# lacks (this machine sends them); `lfs_checkout yes|no` receives them (a tar stream on stdin
# when yes), sets the clone up for LFS (`git lfs install --local`: its status then sees
# content, not pointers) and gives the LFS files their content.
#
# Expects: repo, lfs_oids (space-separated), E_ENTER, E_LFS.
# Defines: lfs_need (in the clone), lfs_checkout yes|no.
# Prints:  LFS_NEED <oid>                an object the clone lacks
#          LFS_FAILED receiving|checkout it failed there (then exits)
#          LFS_DONE                      the LFS files have their content
: "${repo?}" "${lfs_oids?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
lfs_need() {
  for oid in $lfs_oids; do
    r=${oid#??}
    [ -f ".git/lfs/objects/${oid%"$r"}/${r%"${r#??}"}/$oid" ] || echo "LFS_NEED $oid"
  done
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
lfs_checkout() { # yes|no: the missing objects come as a tar stream on stdin
  cd -- "$repo" || exit "$E_ENTER"
  mkdir -p .git/lfs/objects || exit "$E_LFS"
  if [ "$1" = yes ]; then (cd .git/lfs/objects && tar -xf -) || { echo "LFS_FAILED receiving"; exit "$E_LFS"; }; fi
  git lfs install --local >/dev/null 2>&1 || git lfs install --local --skip-repo >/dev/null 2>&1
  unset GIT_LFS_SKIP_SMUDGE
  git lfs checkout >&2 || { echo "LFS_FAILED checkout"; exit "$E_LFS"; }
  echo "LFS_DONE"
}
