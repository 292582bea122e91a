# The unchanged look's second part (slurm-sync-tracked's re-sync in one execution): the look
# starts before the snapshot is made; when the snapshot turns out new, the rest of the sync
# follows in the same execution, under the lock the look took, instead of in a second one that
# would wait for that lock and look at the clone again. After the look's answer, a line
# --end-of-answer--; then the second part, read as a byte count and the script (the re-sync's,
# its pack behind it on stdin), run in this shell: its own EXIT trap gives the lock back, or
# keeps it for the steps that follow. A closed stdin: nothing more (the look's trap gives the
# lock back).
#
# Expects: the clone's lock taken, release_lock as the EXIT trap (lock.sh).
# Prints:  --end-of-answer--, then what the second part prints.
echo "--end-of-answer--"
IFS= read -r n || exit 0
eval "$(dd bs="$n" count=1 iflag=fullblock 2>/dev/null || dd bs=1 count="$n" 2>/dev/null)"
