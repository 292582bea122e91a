# Sizing from history (slurm-runs --stats, slurm-resolve's size_from_history): what past jobs
# used, from Slurm's accounting, in one sacct for all of them (their steps included: the peak
# memory is a step's).
#
# Expects: ids (job ids, comma-separated)
# Prints:  SACCT <sacct's exit code>
#          U <JobID>|<State>|<ElapsedRaw>|<MaxRSS>|<AllocTRES>|<TimelimitRaw>   one per job and step
#          ACCT_DISABLED     when the cluster has no accounting (Slurm 24.11 without it says so)
: "${ids:?}"
a=$(sacct -n -P -j "$ids" --format=JobID,State,ElapsedRaw,MaxRSS,AllocTRES,TimelimitRaw 2>&1); arc=$?
echo "SACCT $arc"
case $a in
  *"accounting storage is disabled"* | *"AccountingStorageType"*) echo ACCT_DISABLED ;;
  *) printf '%s\n' "$a" | sed 's/^/U /' ;;
esac
