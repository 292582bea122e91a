# The untracked sync's first part, in the remote checkout under the clone's lock: the manifest
# the last sync left (unless full=yes), then the second part (deletions and extraction), read as
# a byte count and the script, and run in a subshell so that the lock is released after it. A
# closed stdin means there is nothing to do.
#
# Expects: repo, manifest (relative to the checkout), full (yes|no), E_NO_CHECKOUT;
#          take_lock, release_lock (lock.sh; their lines go to stderr).
# Prints:  the manifest, then a line --end-of-manifest--; then what the second part prints.
: "${repo?}" "${manifest?}" "${full?}"
cd -- "$repo" 2>/dev/null || exit "$E_NO_CHECKOUT"
take_lock >&2
trap release_lock EXIT
if [ "$full" = no ] && [ -f "$manifest" ]; then cat -- "$manifest"; fi
echo "--end-of-manifest--"
IFS= read -r n || exit 0
(eval "$(dd bs="$n" count=1 iflag=fullblock 2>/dev/null || dd bs=1 count="$n" 2>/dev/null)")
