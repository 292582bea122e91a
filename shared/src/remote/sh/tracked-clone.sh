# The tracked sync's remote clone: made when it is not there (a partial clone from origin when
# origin offers one, else a whole clone; `git init` for `--via direct`), and refused when it holds
# another repository (its HEAD descends from none of this repository's root commits).
#
# Expects: repo, via (origin|direct), url, roots (the root commits, space-separated; may be
#          empty), allow_unrelated (yes|no), E_NOT_A_REPO, E_CLONE, E_UNRELATED;
#          clone_progress_start/stop (clone-progress.sh).
# Prints:  NOT_A_REPO                    repo is a directory with files and no .git (then exits)
#          PARTIAL_CLONE                 the clone is partial (blobs fetched when needed)
#          CREATED                       the clone was made now (then created=yes: it has no
#                                        working tree yet, and with via=origin, origin's
#                                        branches as they were an instant ago)
#          UNRELATED <head> <origin>     it holds another repository (then exits)
: "${repo?}" "${via?}" "${url?}" "${roots?}" "${allow_unrelated?}"
if [ ! -d "$repo/.git" ]; then
  if [ -e "$repo" ] && [ -n "$(ls -A -- "$repo" 2>/dev/null)" ]; then echo "NOT_A_REPO"; exit "$E_NOT_A_REPO"; fi
  if [ "$via" = origin ]; then
    # A partial clone when origin offers it (no old versions of files: a long history arrives in
    # a fraction of the time; git fetches an old file's content if something ever needs it);
    # later fetches bring whole commits again. A plain clone where git or origin cannot.
    clone_progress_start "$repo"
    # No checkout of origin's default branch: the snapshot's branch is checked out next
    # (tracked-checkout.sh), which then writes the working tree once, not twice.
    if git clone -q --no-checkout --filter=blob:none -- "$url" "$repo" 2>/dev/null; then
      git -C "$repo" config --unset remote.origin.partialclonefilter 2>/dev/null
      # The configuration stays true to what happened: a plain-path origin ignores the filter
      # (a whole local clone), and then nothing is a promisor.
      if ls "$repo/.git/objects/pack/"*.promisor >/dev/null 2>&1; then
        echo PARTIAL_CLONE
      else
        git -C "$repo" config --unset remote.origin.promisor 2>/dev/null
        git -C "$repo" config --unset extensions.partialclone 2>/dev/null
      fi
    else
      rm -rf -- "$repo"
      git clone -q --no-checkout -- "$url" "$repo" >&2 || { clone_progress_stop "$repo"; exit "$E_CLONE"; }
    fi
    clone_progress_stop "$repo"
  else
    git init -q -- "$repo" >&2 || exit "$E_CLONE"
  fi
  echo CREATED
  created=yes
fi
# The clone's HEAD must descend from one of this repository's root commits, or a sync from the
# wrong directory would check another project out over it. A shallow clone may lack the roots.
if [ "$allow_unrelated" != yes ] && [ -n "$roots" ] && here=$(git -C "$repo" rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null) && [ ! -f "$repo/.git/shallow" ]; then
  related=no
  for r in $roots; do
    if git -C "$repo" merge-base --is-ancestor "$r" HEAD 2>/dev/null; then related=yes; break; fi
  done
  if [ "$related" = no ]; then
    echo "UNRELATED $here $(git -C "$repo" config --get remote.origin.url 2>/dev/null)"
    # A clone made just now for this sync goes again: nothing is left changed.
    if [ "${created:-no}" = yes ]; then rm -rf -- "$repo"; fi
    exit "$E_UNRELATED"
  fi
fi
