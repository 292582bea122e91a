# slurm-watch's serving loop: one ssh execution for the whole watch. It reads request lines
# ("W <quarter seconds> <watch the end marker: 0|1> <stdout offset> <stderr offset>"), waits (less
# when the end marker appears), then answers each with one poll: the job's queue line (and, while
# it pends, what decides the wait), else how accounting says it ended, then the new bytes of its
# logs.
#
# Expects: job, out_path, err_path (empty: stderr goes to out_path), marker (the end marker's
#          path, or empty), cap (the most bytes of one chunk), fmt (squeue's format), afmt
#          (sacct's), E_BAD_REQUEST; nap, pending_once (pending-facts.sh), chunk (log-chunk.sh).
# Prints:  per request: WOKE, then MARK (the end marker is there), Q <squeue line> | QERR <line> |
#          A <sacct line> | A_EMPTY | AERR <line> | ACCT_DISABLED (SC <scontrol line> | SC_PURGED
#          [MARKTEXT <line>]), BY <uid> <user> (who cancelled), the pending lines, then
#          CHUNK out|err <offset> <length> <size> and the bytes (or MISSING/TRUNCATED out|err),
#          then END.
: "${job?}" "${out_path?}" "${err_path?}" "${marker?}" "${cap?}" "${fmt?}" "${afmt?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
pause() {
  # $1 quarter seconds; $2 = 1: end early when the end marker appears.
  # The marker is looked for every quarter second in the first 2 s of a wait (a short job's end
  # is seen at once), then every second: a long wait starts a quarter of the sleeps.
  if [ "$2" = 1 ] && [ -n "$marker" ]; then
    k=0
    while [ "$k" -lt "$1" ]; do
      [ -e "$marker" ] && return
      if [ "$k" -lt 8 ] || [ $(($1 - k)) -lt 4 ]; then
        nap 0.25
        k=$((k + 1))
      else
        nap 1
        k=$((k + 4))
      fi
    done
  elif [ "$1" -gt 0 ]; then
    nap "$(($1 / 4)).$(($1 % 4 * 25))"
  fi
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
acct() {
  a=$(env SLURM_TIME_FORMAT=%s sacct -X -n -P -j "$job" --format="$afmt" 2>&1); arc=$?
  case "$a" in
    *"accounting storage is disabled"*)
      echo ACCT_DISABLED
      if sc=$(scontrol show job -o "$job" 2>&1); then printf 'SC %s\n' "$(printf '%s\n' "$sc" | head -n 1)"
      else
        # Purged: the job ended more than MinJobAge ago. Its end marker says how its command ended.
        case "$sc" in *"Invalid job id"*)
          echo SC_PURGED
          if [ -n "$marker" ] && [ -s "$marker" ]; then printf 'MARKTEXT %s\n' "$(head -n 1 "$marker")"; fi ;;
        esac
      fi ;;
    *)
      if [ "$arc" -ne 0 ]; then printf 'AERR %s\n' "$(printf '%s\n' "$a" | head -n 1)"
      elif [ -z "$a" ]; then echo A_EMPTY
      else printf 'A %s\n' "$(printf '%s\n' "$a" | head -n 1)"
      fi ;;
  esac
  uid=$(printf '%s\n' "$a" | sed -n 's/^CANCELLED by \([0-9][0-9]*\).*/\1/p' | head -n 1)
  if [ -n "$uid" ]; then printf 'BY %s %s\n' "$uid" "$(getent passwd "$uid" | cut -d: -f1)"; fi
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
poll() {
  if [ -n "$marker" ] && [ -e "$marker" ]; then echo MARK; fi
  q=$(env SLURM_TIME_FORMAT=%s squeue -h -j "$job" -o "$fmt" 2>&1); qrc=$?
  if [ "$qrc" -eq 0 ] && [ -n "$q" ]; then
    printf 'Q %s\n' "$(printf '%s\n' "$q" | head -n 1)"
    # Pending: what decides the wait, once per reason (pending-facts.sh).
    pending_once "$job" "$(printf '%s\n' "$q" | head -n 1)"
    # COMPLETING after the job's own end marker: its nodes are cleaning up, and accounting may
    # already know how it ended (slurm-watch only takes that answer when the marker is there).
    case "$q" in COMPLETING*) if [ -n "$marker" ] && [ -e "$marker" ]; then acct; fi ;; esac
  elif [ "$qrc" -ne 0 ] && ! printf '%s' "$q" | grep -q 'Invalid job id'; then
    printf 'QERR %s\n' "$(printf '%s\n' "$q" | head -n 1)"
  else
    acct
  fi
  chunk out "$out_path" "$1"
  if [ -n "$err_path" ]; then chunk err "$err_path" "$2"; fi
  echo END
}
while IFS=' ' read -r verb quarters mark o e; do
  [ "$verb" = W ] || exit "$E_BAD_REQUEST"
  pause "$quarters" "$mark"
  echo WOKE
  poll "$o" "$e" </dev/null
done
