# slurm-resolve --place: what decides when a request would start on this cluster, in one
# execution: Slurm's estimate for exactly this request (sbatch --test-only with its arguments),
# the partition's limits, its nodes' GPUs free now, the person's own pending jobs there, and
# with a QOS its limits, the person's running jobs, and the person's associations' limits.
#
# Expects: partition (empty: the cluster's default partition), qos (empty: none named)
# Arguments: the request's sbatch arguments (--nodes, --gpus-per-node, --time, --account, ...).
# Prints:
#   PARTITION <name>                          the partition asked (or the default)
#   TEST <sbatch --test-only's words, one line; the start in Unix time>
#   PART <scontrol show partition -o NAME>
#   NODE <name> <state> <gres> <gres used>    every node of the partition (sinfo -N -O)
#   MINE_PENDING <count>                      the person's pending jobs in the partition
#   PQ <name>|<MaxTRESPerUser>|<MaxJobsPerUser>|<GrpTRES>|<MaxTRES>|<MaxWall>   with a QOS
#   PR <job id> <qos> <account> <partition> <tres-alloc>   the person's running jobs
#   PA <account>|<partition>|<GrpTRES>|<MaxTRES>|<MaxJobs>|<GrpJobs>   the person's associations
# Needs: pending-facts.sh before it (qos_facts, assoc_facts, running_facts).
: "${partition?}" "${qos?}"
me=$(id -un)
p=$partition
[ -n "$p" ] || p=$(sinfo -h -o '%P' 2>/dev/null | sed -n 's/\*$//p' | head -n 1)
printf 'PARTITION %s\n' "$p"
printf 'TEST %s\n' "$(env SLURM_TIME_FORMAT=%s sbatch --test-only "$@" --wrap true 2>&1 | tr '\n' ' ')"
printf 'PART %s\n' "$(scontrol show partition -o "$p" 2>/dev/null | head -n 1)"
sinfo -h -N -p "$p" -O 'NodeList:60,StateCompact:20,Gres:100,GresUsed:120' 2>/dev/null | sed 's/^/NODE /'
printf 'MINE_PENDING %s\n' "$(squeue -h -u "$me" -t PENDING -p "$p" -o '%i' 2>/dev/null | wc -l | tr -d ' ')"
[ -z "$qos" ] || qos_facts "$qos"
assoc_facts "$me"
running_facts "$me"
