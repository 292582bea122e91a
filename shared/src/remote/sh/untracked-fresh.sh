# The untracked sync's second part, sent without waiting for the first part's manifest because
# the tracked sync made the clone in this same pipeline (created: no manifest can be there yet).
# When one is there after all (the document came from an earlier run, or another checkout's sync
# got in between), what was sent is read and dropped, nothing is changed, and the tool syncs
# again against that manifest (deletions included).
#
# Expects: repo, manifest (relative to the checkout), E_NO_CHECKOUT.
# Prints:  NOT_FRESH                     a manifest is there (then exits 0, its stdin read)
: "${repo?}" "${manifest?}"
cd -- "$repo" 2>/dev/null || exit "$E_NO_CHECKOUT"
if [ -f "$manifest" ]; then cat >/dev/null; echo NOT_FRESH; exit 0; fi
