# slurm-sync-tracked's re-sync in one execution: the clone was last made equal to `base` by a
# sync from this checkout, and the new snapshot's objects that `base` does not reach arrive on
# stdin as one pack (made here against it); they are unpacked and the snapshot is checked out
# (tracked-checkout.sh follows, with via=delta). Nothing goes through origin.
#
# Expects: repo, url, base, snapshot, temp, E_FETCH; commit_of (head-of.sh); the clone's lock
#          taken.
# Prints:  DELTA_REFUSED <what>          the clone is not at base (no clone, or its HEAD moved), or
#                                        its origin is not repo_url:
#                                        nothing is read or changed (then exits 0); the sync
#                                        goes on through origin
: "${repo?}" "${url?}" "${base?}" "${snapshot?}" "${temp?}"
cd -- "$repo" 2>/dev/null || { echo "DELTA_REFUSED no clone at $repo"; exit 0; }
commit_of .
# shellcheck disable=SC2154 # at is set by commit_of (head-of.sh)
if [ "$at" != "$base" ]; then echo "DELTA_REFUSED HEAD ${at:-none}"; exit 0; fi
# A clone whose origin is not repo_url syncs through origin, which says so (tracked-checkout.sh).
if [ "$(git config --get remote.origin.url 2>/dev/null)" != "$url" ]; then echo "DELTA_REFUSED its origin is not repo_url"; exit 0; fi
git unpack-objects -q >&2 || exit "$E_FETCH"
