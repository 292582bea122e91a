# The new bytes of a job's log since the offset this machine has read to, at most `cap` of
# them (slurm-watch's polls: watch-poll.sh for one job, array-poll.sh for a sweep's tasks).
#
# Expects: cap (the most bytes one chunk carries).
# Defines: chunk WHAT PATH OFFSET (WHAT names the log in the reply: `out`, or `out 3` for task 3).
# Prints:  MISSING WHAT                               no such file (yet)
#          TRUNCATED WHAT                             the file is shorter than the offset: read
#                                                     again from its start
#          CHUNK WHAT <offset> <length> <size>        then the <length> bytes
: "${cap?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
chunk() {
  if [ ! -e "$2" ]; then echo "MISSING $1"; return; fi
  size=$(wc -c < "$2" | tr -d ' ')
  off=$3
  if [ "$size" -lt "$off" ]; then echo "TRUNCATED $1"; off=0; fi
  len=$((size - off))
  if [ "$len" -gt "$cap" ]; then len=$cap; fi
  echo "CHUNK $1 $off $len $size"
  if [ "$len" -gt 0 ]; then tail -c +$((off + 1)) "$2" | head -c "$len"; fi
}
