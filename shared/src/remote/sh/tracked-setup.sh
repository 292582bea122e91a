# The tracked sync's common start: Git LFS files check out as their pointers (their content
# follows from this machine's LFS store, tracked-lfs.sh).
GIT_LFS_SKIP_SMUDGE=1
export GIT_LFS_SKIP_SMUDGE
