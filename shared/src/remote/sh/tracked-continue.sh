# A step's second part, in the same execution and under the lock the first part took: after
# the first part's answer and a line --end-of-answer--, the script waits for what follows, read
# as a byte count and the script (what it reads behind it on stdin) and run in this shell, so it
# knows what the first part found. A closed stdin ends it (the EXIT trap gives the lock back).
# A second execution would cost its own round trips, wait for the lock and look again.
#
# Two first parts end so (slurm-sync-tracked):
# - the unchanged look, started before the snapshot is made: the second part is sent as soon as
#   the snapshot is made (not after the answer): nothing (the snapshot is the one on record), or
#   the re-sync against the recorded snapshot with its pack; it knows what the look found
#   (look=unchanged: the clone and the recorded submodules as the last sync left them);
# - the clone's checkout whose submodules lack their commits: the second part, sent after the
#   answer (SUB_MISSING, SUB_BASE), brings their packs and checks every submodule out, or
#   keeps the lock for the pushes that follow instead.
# The second part's own EXIT trap gives the lock back or keeps it for the steps that follow.
#
# Expects: the clone's lock taken, release_lock as the EXIT trap (lock.sh).
# Prints:  --end-of-answer--, then what the second part prints.
echo "--end-of-answer--"
IFS= read -r n || exit 0
eval "$(dd bs="$n" count=1 iflag=fullblock 2>/dev/null || dd bs=1 count="$n" 2>/dev/null)"
