# After an untracked sync: the files it put into the clone kept as its snapshot's own set (see
# untracked-store.sh, which must come first), for the jobs submitted with that snapshot.
#
# Expects: manifest, paths0 (the clone's manifest files); untracked_store and copy_listed0 from
#          untracked-store.sh.
# Defines: keep_untracked (its snapshot's set kept, the newest 32 snapshots' sets kept, older
#          ones removed; never fails the sync).
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
  ku_dir=$untracked_store/$ku_snap
  fresh_dir() {
    if [ -e "$1" ] || [ -L "$1" ]; then rm -rf -- "$1" || return 1; fi
    mkdir -p -- "$1"
  }
  fresh_dir "$ku_dir.new" || return 0
  if [ -s "$paths0" ] && ! link_listed0 "$ku_dir.new" <"$paths0"; then
    if ! { fresh_dir "$ku_dir.new" && copy_listed0 . "$ku_dir.new" <"$paths0"; }; then
      rm -rf -- "$ku_dir.new"
      return 0
    fi
  fi
  if [ -f "$paths0" ]; then cp -- "$paths0" "$ku_dir.paths0" || return 0
  else : >"$ku_dir.paths0" || return 0; fi
  if [ -e "$ku_dir" ] || [ -L "$ku_dir" ]; then rm -rf -- "$ku_dir"; fi
  mv -- "$ku_dir.new" "$ku_dir" || return 0
  # Older sets go only when there are more than 32 (counted by the shell: no process).
  set -- "$untracked_store"/*.paths0
  [ "$#" -gt 32 ] || return 0
  ku_n=0
  # Newest first; the names are commit ids (no blanks), and ls -t is the portable age order.
  # shellcheck disable=SC2045
  for ku_name in $(ls -1t -- "$untracked_store" 2>/dev/null); do
    case $ku_name in *.*) continue ;; esac
    ku_n=$((ku_n + 1))
    [ "$ku_n" -gt 32 ] || continue
    rm -rf -- "${untracked_store:?}/$ku_name" "$untracked_store/$ku_name.paths0"
  done
  return 0
}
