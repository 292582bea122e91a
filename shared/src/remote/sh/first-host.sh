# The first host of the job: `first_host` prints the first host of $SLURM_JOB_NODELIST with
# scontrol, or, where there is no Slurm client (inside a container image), from the list itself
# (`node[01-04],gpu7` -> `node01`).
#
# Expects: SLURM_JOB_NODELIST (in the environment).
# Defines: first_host.
# shellcheck disable=SC2317 # a script that includes this file may not call it
first_host() {
  if command -v scontrol >/dev/null 2>&1; then scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1; return; fi
  l=$SLURM_JOB_NODELIST h=${SLURM_JOB_NODELIST%%,*}
  case $h in
    *\[*) p=${l%%\[*} r=${l#*\[}; r=${r%%[],-]*}; printf '%s%s\n' "$p" "$r" ;;
    *) printf '%s\n' "$h" ;;
  esac
}
