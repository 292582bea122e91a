# The tracked sync's common start: Git LFS files check out as their pointers (their content
# follows from this machine's LFS store, tracked-lfs.sh), and the clone's lock is taken in the
# name of this sync's snapshot branch.
#
# Expects: temp (the snapshot's branch).
# Defines: token (for clone-lock.sh).
: "${temp?}"
GIT_LFS_SKIP_SMUDGE=1
export GIT_LFS_SKIP_SMUDGE
token="$temp"
