# The unchanged look's second part (slurm-sync-tracked's re-sync in one execution): the look
# starts before the snapshot is made and, after its answer and a line --end-of-answer--, waits
# under the lock it took for what follows, which is sent as soon as the snapshot is made (not
# after the answer): nothing (a closed stdin: the snapshot is the one on record; the look's trap
# gives the lock back), or the re-sync against the recorded snapshot, read as a byte count and
# the script (its pack behind it on stdin) and run in this shell, under the same lock: it knows
# what the look found (look=unchanged: the clone and the recorded submodules as the last sync
# left them), and its own EXIT trap gives the lock back or keeps it for the steps that follow.
# A second execution would wait for the look's lock and look at the clone again.
#
# Expects: the clone's lock taken, release_lock as the EXIT trap (lock.sh).
# Prints:  --end-of-answer--, then what the second part prints.
echo "--end-of-answer--"
IFS= read -r n || exit 0
eval "$(dd bs="$n" count=1 iflag=fullblock 2>/dev/null || dd bs=1 count="$n" 2>/dev/null)"
