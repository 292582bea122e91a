# After an untracked sync: the files it put into the clone kept as its snapshot's own set (see
# untracked-store.sh, which must come first), for the jobs submitted with that snapshot. Runs
# under the clone's lock (one sync at a time); job trees read the sets without it.
#
# Expects: manifest, paths0 (the clone's manifest files); untracked_store, current_set and
#          copy_listed0 from untracked-store.sh.
# Defines: keep_untracked (a new set for the manifest's snapshot, made and then named in the
#          snapshot's pointer file; the replaced set retired. Only the newest 32 snapshots keep a
#          set; a retired set is removed an hour after it was retired. Never fails the sync).
# Prints:  nothing on stdout.
: "${untracked_store:?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
link_listed0() {
  case $(cp --version 2>/dev/null) in *GNU*) ;; *) return 1 ;; esac
  xargs -0 cp -Pl --parents -t "$1" -- 2>/dev/null
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
keep_untracked() {
  : "${manifest:?}" "${paths0:?}"
  # The snapshot, from the manifest's first line (read by the shell: no process).
  ku_first=''
  { IFS= read -r ku_first <"$manifest"; } 2>/dev/null
  case $ku_first in *snapshot=*) ku_snap=${ku_first##*snapshot=} ;; *) ku_snap='' ;; esac
  case $ku_snap in '' | *[!0-9a-f]*) return 0 ;; esac
  # The layout before sets were never changed in place: one folder per snapshot, replaced.
  if [ -d .git/slurm-tools/untracked-by-snapshot ]; then rm -rf .git/slurm-tools/untracked-by-snapshot; fi
  mkdir -p -- "$untracked_store" || return 0
  # A new name (mkdir is atomic: never another sync's set, nor one a job's tree reads).
  ku_base=$ku_snap-$(date +%s)-$$ ku_i=0
  ku_set=$ku_base
  until mkdir -- "$untracked_store/$ku_set" 2>/dev/null; do
    ku_i=$((ku_i + 1))
    [ "$ku_i" -lt 10 ] || return 0
    ku_set=$ku_base-$ku_i
  done
  ku_dir=$untracked_store/$ku_set
  if [ -s "$paths0" ] && ! link_listed0 "$ku_dir" <"$paths0"; then
    if ! { rm -rf -- "$ku_dir" && mkdir -- "$ku_dir" && copy_listed0 . "$ku_dir" <"$paths0"; }; then
      rm -rf -- "$ku_dir"
      return 0
    fi
  fi
  if [ -f "$paths0" ]; then cp -- "$paths0" "$ku_dir.paths0"; else : >"$ku_dir.paths0"; fi ||
    { rm -rf -- "$ku_dir" "$ku_dir.paths0"; return 0; }
  # Named in the pointer file by a rename: a job's tree reads the old name or the new, whole.
  current_set "$ku_snap"
  ku_old=$current_set
  if ! { printf '%s\n' "$ku_set" >"$untracked_store/$ku_snap.next" &&
    mv -f -- "$untracked_store/$ku_snap.next" "$untracked_store/$ku_snap"; }; then
    rm -rf -- "$ku_dir" "$ku_dir.paths0" "$untracked_store/$ku_snap.next"
    return 0
  fi
  # Retired now: its time is when it stopped being current (it is removed an hour later).
  if [ -n "$ku_old" ]; then touch -c -- "$untracked_store/$ku_old"; fi
  retire_untracked_sets
  return 0
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
retire_untracked_sets() {
  # Only when there are more than 32 sets (counted by the shell: no process).
  set -- "$untracked_store"/*-*.paths0
  [ "$#" -gt 32 ] || return 0
  # Snapshots beyond the newest 32 lose their pointer: their set is retired now. Newest first;
  # the names are commit ids (no blanks), and ls -t is the portable age order.
  rs_n=0
  # shellcheck disable=SC2045
  for rs_name in $(ls -1t -- "$untracked_store" 2>/dev/null); do
    case $rs_name in *.* | *-*) continue ;; esac
    rs_n=$((rs_n + 1))
    [ "$rs_n" -gt 32 ] || continue
    current_set "$rs_name"
    rm -f -- "${untracked_store:?}/$rs_name"
    if [ -n "$current_set" ]; then touch -c -- "$untracked_store/$current_set"; fi
  done
  # Sets retired more than an hour ago (one find for all), never a snapshot's current one.
  # shellcheck disable=SC2044 # the names are this file's (SNAPSHOT-SECONDS-PID: no blanks)
  for rs_dir in $(find "$untracked_store/." ! -name . -prune -type d -name '*-*' -mmin +60 2>/dev/null); do
    rs_set=${rs_dir##*/}
    current_set "${rs_set%%-*}"
    [ "$current_set" = "$rs_set" ] && continue
    rm -rf -- "${untracked_store:?}/$rs_set" "$untracked_store/$rs_set.paths0"
  done
}
