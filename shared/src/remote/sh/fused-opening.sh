# The opening of a fused conversation (both syncs and a command in one ssh execution,
# shared/src/sync/fused.rs): the untracked sync's manifest when asked for (none when the checkout
# or the manifest is not there yet: then every untracked file is sent), then the framed rest, read
# as a byte count and the script. A closed stdin means nothing more to do.
#
# Expects: send_manifest (yes|no), repo, manifest (relative to the checkout).
# Prints:  the manifest and a line --end-of-manifest-- (send_manifest=yes); then what the rest
#          prints.
: "${send_manifest?}" "${repo?}" "${manifest?}"
if [ "$send_manifest" = yes ]; then
  if [ -f "$repo/$manifest" ]; then cat -- "$repo/$manifest"; fi
  echo "--end-of-manifest--"
fi
IFS= read -r n || exit 0
eval "$(dd bs="$n" count=1 iflag=fullblock 2>/dev/null || dd bs=1 count="$n" 2>/dev/null)"
