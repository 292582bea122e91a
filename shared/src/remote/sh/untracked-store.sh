# Each snapshot's own untracked files, kept for the jobs submitted with it. The clone holds the
# untracked files of its latest untracked sync only: when two checkouts sync into one clone, the
# second replaces the first's files before the first submits. So after each untracked sync its
# files are also kept, per snapshot, under the clone's .git, as hard links (every tar the syncs
# use replaces a file by a new one and never writes into it, so a link keeps the content it had;
# a copy where cp cannot link), and a job's tree takes its own snapshot's set from there.
#
# Expects: manifest, paths0 (the clone's manifest files; the working directory is the clone).
# Defines: gnu_tar; copy_listed0 FROM TO (copies the NUL-separated paths on stdin);
#          keep_untracked (after a sync: its snapshot's set kept, the newest 32 snapshots' sets
#          kept, older ones removed; never fails the sync);
#          untracked_of COMMIT (status 0 when COMMIT's own set is kept, in
#          "$untracked_store/COMMIT" with its list in "$untracked_store/COMMIT.paths0").
# Prints:  nothing on stdout.
untracked_store=.git/slurm-tools/untracked-by-snapshot
gnu_tar() { tar --version 2>/dev/null | grep -q GNU; }
copy_listed0() {
  if gnu_tar; then (cd -- "$1" && tar --null -T - -cf -) | (cd -- "$2" && tar -xf -)
  else tr '\000' '\n' | (cd -- "$1" && tar -T - -cf -) | (cd -- "$2" && tar -xf -); fi
}
link_listed0() {
  cp --version 2>/dev/null | grep -q GNU &&
    xargs -0 cp -Pl --parents -t "$1" -- 2>/dev/null
}
keep_untracked() {
  : "${manifest:?}" "${paths0:?}"
  ku_snap=$(sed -n '1s/.*snapshot=//p' "$manifest" 2>/dev/null)
  case $ku_snap in '' | *[!0-9a-f]*) return 0 ;; esac
  ku_dir=$untracked_store/$ku_snap
  fresh_dir() { rm -rf -- "$1" && mkdir -p -- "$1"; }
  fresh_dir "$ku_dir.new" || return 0
  if [ -s "$paths0" ] && ! link_listed0 "$ku_dir.new" <"$paths0"; then
    if ! { fresh_dir "$ku_dir.new" && copy_listed0 . "$ku_dir.new" <"$paths0"; }; then
      rm -rf -- "$ku_dir.new"
      return 0
    fi
  fi
  if [ -f "$paths0" ]; then cp -- "$paths0" "$ku_dir.paths0" || return 0
  else : >"$ku_dir.paths0" || return 0; fi
  rm -rf -- "$ku_dir"
  mv -- "$ku_dir.new" "$ku_dir" || return 0
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
untracked_of() {
  [ -d "$untracked_store/$1" ] && [ -f "$untracked_store/$1.paths0" ]
}
