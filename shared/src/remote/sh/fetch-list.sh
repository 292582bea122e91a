# slurm-fetch, step 1: list the files a job's patterns match, without trusting any name.
#
# Expects (assigned before this file): tree, work (the job's code tree and work directory).
# Defines:  list BASE DIR GLOB (BASE is T or W; GLOB as in `find -path`, relative to DIR).
# Prints, one NUL-terminated record each (a name can hold any byte but NUL, newlines included,
# so no name can forge a record):
#   BASE SIZE MTIME ./PATH   a regular file below DIR (never inside .git; symlinks not followed)
#   NODIR BASE               DIR does not exist
#   FINDFAIL BASE            find failed in DIR
if find . -maxdepth 0 -printf '' 2>/dev/null; then
  list() {
    [ -d "$2" ] || { printf 'NODIR %s\0' "$1"; return 0; }
    (cd "$2" && find . -path ./.git -prune -o -type f -path "./$3" -printf "$1 %s %T@ %p\\0") ||
      printf 'FINDFAIL %s\0' "$1"
  }
else
  # No GNU find (busybox): stat each file; slower, the same records.
  list() {
    [ -d "$2" ] || { printf 'NODIR %s\0' "$1"; return 0; }
    (cd "$2" && find . -path ./.git -prune -o -type f -path "./$3" -exec sh -c '
      b=$1; shift
      for f do printf "%s %s %s\0" "$b" "$(stat -c "%s %Y" "$f")" "$f"; done' sh "$1" {} +) ||
      printf 'FINDFAIL %s\0' "$1"
  }
fi
