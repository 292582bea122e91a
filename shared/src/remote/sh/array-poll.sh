# slurm-watch on a sweep: one session serves the polls of a whole job array. Each poll asks Slurm
# once for every task (one `squeue -r` of the array), and accounting at most once (one sacct of
# the array, or scontrol where accounting is disabled), and only when a task it follows has
# left the queue; then it reads the bytes each named task's logs gained since the offsets the
# request gives (`tail -c +N`, never from the start). So a poll costs the controller the same
# for 100 tasks as for one job.
#
# Expects: job (the array's job id), out_pre, out_post (a task's stdout is
#          "$out_pre<index>$out_post"), err_pre, err_post (empty err_pre: stderr is in stdout),
#          cap (the most bytes read per log per poll), E_BAD_REQUEST
# Needs:   shared::slurm::NAP and log-chunk.sh (chunk) before it.
# Reads:   requests on stdin, one per line: `W <quarter seconds> <open>`, where <open> is the
#          tasks still followed, comma-separated `index:out offset:err offset:read` (read 1: bring
#          its logs' new bytes), or `-` for none.
# Prints:  per request: WOKE, then `Q <%i|%T|%N|%M|%r>` per task in the queue, or
#          `QERR <squeue's line>`; when a followed task is not in the queue,
#          `A <JobID|State|ExitCode|Elapsed|NodeList>` per task from sacct, or `AERR <line>`, or
#          ACCT_DISABLED and `SC <scontrol -o line>` per task (or SC_PURGED: scontrol no
#          longer knows the array); `BY <uid> <name>` for who
#          cancelled; `CHUNK out|err <index> <offset> <length> <size>` followed by the bytes, or
#          `MISSING out|err <index>`, or `TRUNCATED out|err <index>`; `CALLS <squeue runs>
#          <sacct or scontrol runs>` (this poll's questions to Slurm, counted where they are
#          asked); END.
# Exits:   E_BAD_REQUEST on a request it does not know; 0 when stdin closes.
: "${job:?}" "${out_pre:?}" "${cap:?}" "${E_BAD_REQUEST:?}"
: "${out_post?}" "${err_pre?}" "${err_post?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
accounting() {
  calls_a=$((calls_a + 1))
  a=$(env SLURM_TIME_FORMAT=%s sacct -X -n -P -j "$job" --format=JobID,State,ExitCode,Elapsed,NodeList 2>&1); arc=$?
  case "$a" in
    *"accounting storage is disabled"*)
      echo ACCT_DISABLED
      if sc=$(scontrol -o show job "$job" 2>&1); then
        printf '%s\n' "$sc" | while IFS= read -r l; do
          [ -n "$l" ] && printf 'SC %s\n' "$l"
        done
      else
        # Purged: the array's tasks ended more than MinJobAge ago, and nothing will say how.
        case "$sc" in *"Invalid job id"*) echo SC_PURGED ;; esac
      fi ;;
    *)
      if [ "$arc" -ne 0 ]; then printf 'AERR %s\n' "$(printf '%s\n' "$a" | head -n 1)"
      else
        printf '%s\n' "$a" | while IFS= read -r l; do [ -n "$l" ] && printf 'A %s\n' "$l"; done
        for uid in $(printf '%s\n' "$a" | sed -n 's/.*|CANCELLED by \([0-9][0-9]*\).*/\1/p' | sort -u); do
          printf 'BY %s %s\n' "$uid" "$(getent passwd "$uid" | cut -d: -f1)"
        done
      fi ;;
  esac
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
poll_array() {
  calls_q=1 calls_a=0
  q=$(env SLURM_TIME_FORMAT=%s squeue -h -r -j "$job" -o '%i|%T|%N|%M|%r' 2>&1); qrc=$?
  if [ "$qrc" -ne 0 ]; then
    case "$q" in
      *"Invalid job id"*) q='' ;;
      *) printf 'QERR %s\n' "$(printf '%s\n' "$q" | head -n 1)"; echo "CALLS 1 0"; echo END; return ;;
    esac
  fi
  printf '%s\n' "$q" | while IFS= read -r l; do [ -n "$l" ] && printf 'Q %s\n' "$l"; done
  open=$(printf '%s' "$1" | tr ',' ' ')
  [ "$open" = - ] && open=''
  gone=0
  for t in $open; do
    i=${t%%:*}
    case "
$q" in
      *"
${job}_${i}|"*) ;;
      *) gone=1 ;;
    esac
  done
  if [ "$gone" = 1 ]; then accounting; fi
  for t in $open; do
    i=${t%%:*} rest=${t#*:}
    o=${rest%%:*} rest=${rest#*:}
    e=${rest%%:*} r=${rest#*:}
    [ "$r" = 1 ] || continue
    chunk "out $i" "$out_pre$i$out_post" "$o"
    if [ -n "$err_pre" ]; then chunk "err $i" "$err_pre$i$err_post" "$e"; fi
  done
  echo "CALLS $calls_q $calls_a"
  echo END
}
while IFS=' ' read -r verb quarters open; do
  [ "$verb" = W ] || exit "$E_BAD_REQUEST"
  case $quarters in '' | *[!0-9]*) exit "$E_BAD_REQUEST" ;; esac
  if [ "$quarters" -gt 0 ]; then nap "$((quarters / 4)).$((quarters % 4 * 25))"; fi
  echo WOKE
  poll_array "${open:--}" </dev/null
done
