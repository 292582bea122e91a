# slurm-watch: what decides why a pending job waits, gathered once per pending reason (the
# watch's serving loop calls it when the reason changes), for slurm-watch to explain the reason
# with the figure that matters and the action that would help (shared/src/slurm/pending.rs).
#
# Defines: pending_once JOB SQUEUE_LINE   pending_facts when SQUEUE_LINE (squeue's %T|%r|...)
#                                        says PENDING for a reason not gathered yet (kept in
#                                        `explained`)
#          pending_facts JOB REASON
#          qos_facts QOS        the PQ line below (also slurm-resolve --place's)
#          assoc_facts USER     the PA lines below (also slurm-resolve --place's)
#          running_facts USER   the PR lines below (also slurm-resolve --place's)
# Prints (each line tagged; a query the site refuses or lacks prints nothing):
#   PJ <scontrol show job -o JOB>                         always
#   PP <scontrol show partition -o, one per partition>    partition limits, resources, priority
#   PI <partition>|<idle nodes>                           resources, priority
#   PQ <name>|<MaxTRESPerUser>|<MaxJobsPerUser>|<GrpTRES>|<MaxTRES>|<MaxWall>
#                                                         the job's QOS (a limit of yours)
#   PA <account>|<partition>|<GrpTRES>|<MaxTRES>|<MaxJobs>|<GrpJobs>
#                                                         the user's associations (a limit of yours)
#   PR <job id> <qos> <account> <partition> <tres-alloc>  the user's running jobs (a limit of yours)
explained=
# shellcheck disable=SC2317 # a script that includes this file may not call it
pending_once() {
  case $2 in 'PENDING|'*) ;; *) return 0 ;; esac
  po_reason=${2#PENDING|}
  po_reason=${po_reason%%|*}
  [ "$po_reason" != "$explained" ] || return 0
  explained=$po_reason
  pending_facts "$1" "$po_reason"
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
pending_facts() {
  pf_sc=$(scontrol show job -o "$1" 2>/dev/null | head -n 1)
  printf 'PJ %s\n' "$pf_sc"
  case $2 in
    Partition* | Resources | Priority)
      scontrol show partition -o 2>/dev/null | sed 's/^/PP /'
      sinfo -h -t idle -o '%P|%D' 2>/dev/null | sed 's/^/PI /' ;;
    QOS* | Assoc* | MaxCpuPerAccount | AccountingPolicy)
      pf_me=$(id -un)
      pf_qos=$(printf '%s\n' "$pf_sc" | tr ' ' '\n' | sed -n 's/^QOS=//p' | head -n 1)
      assoc_facts "$pf_me"
      qos_facts "$pf_qos"
      running_facts "$pf_me" ;;
  esac
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
qos_facts() {
  [ -z "$1" ] || sacctmgr -n -P show qos "$1" format=Name,MaxTRESPU,MaxJobsPU,GrpTRES,MaxTRES,MaxWall 2>/dev/null | sed 's/^/PQ /'
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
running_facts() {
  squeue -h -t RUNNING -u "$1" -O 'JobID:30,QOS:40,Account:40,Partition:40,tres-alloc:500' 2>/dev/null | sed 's/^/PR /'
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
assoc_facts() {
  sacctmgr -n -P show assoc where user="$1" format=Account,Partition,GrpTRES,MaxTRES,MaxJobs,GrpJobs 2>/dev/null | sed 's/^/PA /'
}
