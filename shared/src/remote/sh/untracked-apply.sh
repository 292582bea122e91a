# The untracked sync's second part, in the remote checkout: files this machine no longer has are
# deleted (never through a symbolic link, never outside the checkout) with the directories they
# leave empty; a symbolic link or a file where the stream needs a directory makes way; the tar
# stream on stdin is extracted.
#
# Defines: delete_gone PATH... (files and symbolic links only; paths with . or .. are skipped),
#          make_dirs_way DIR... (parents first), extract_untracked gzip|plain.
# Prints:  DELETED <path>      a file deleted
#          UNLINKED <dir>      a symbolic link removed where a directory comes
#          REPLACED <dir>      a file removed where a directory comes
# shellcheck disable=SC2317 # a script that includes this file may not call it
delete_gone() {
  for p do
    case "/$p/" in */../*|*/./*|//*) continue ;; esac
    d=$p; safe=1
    while :; do
      case "$d" in */*) d=${d%/*} ;; *) break ;; esac
      if [ -L "$d" ]; then safe=0; break; fi
    done
    [ "$safe" = 1 ] || continue
    if [ -L "$p" ] || [ -f "$p" ]; then
      rm -f -- "$p" && echo "DELETED $p"
      d=$p
      while :; do
        case "$d" in */*) d=${d%/*} ;; *) break ;; esac
        rmdir -- "$d" 2>/dev/null || break
      done
    fi
  done
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
make_dirs_way() {
  for d do
    if [ -L "$d" ]; then rm -f -- "$d"; echo "UNLINKED $d"
    elif [ -e "$d" ] && [ ! -d "$d" ]; then rm -f -- "$d"; echo "REPLACED $d"; fi
  done
}
# GNU tar's quieter, directory-keeping options only where tar is GNU's (asked here, not guessed on
# the other side: bsdtar and busybox tar refuse them).
# shellcheck disable=SC2317 # a script that includes this file may not call it
extract_untracked() { # gzip|plain
  z=
  if [ "$1" = gzip ]; then z=-z; fi
  if case $(tar --version 2>/dev/null) in *GNU*) true ;; *) false ;; esac; then
    # shellcheck disable=SC2086
    tar -x --no-same-owner --warning=no-timestamp --no-overwrite-dir $z -f -
  else
    # shellcheck disable=SC2086
    tar -x --no-same-owner $z -f -
  fi || exit $?
}
