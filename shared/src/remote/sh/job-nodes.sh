# slurm-watch --retry: the nodes a job ran on.
#
# Expects (assigned before this file): job (the job id).
# Reads accounting first; where it has nothing (a site without accounting: Slurm 24.11's sacct
# then only says "accounting storage is disabled"), scontrol, which keeps an ended job for
# MinJobAge.
# Prints one line: the node list ("" when neither knows it; scontrol's "(null)" for a job that
# never ran).
: "${job:?}"
n=$(sacct -X -n -P -o NodeList -j "$job" 2>/dev/null | head -n 1)
case $n in
  '' | 'None assigned') n=$(scontrol -o show job "$job" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeList=//p' | head -n 1) ;;
esac
printf '%s\n' "$n"
