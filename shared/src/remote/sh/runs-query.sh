# slurm-runs' look at one cluster: one squeue for every id (finished jobs Slurm still holds
# included), then one sacct for the ids squeue did not know.
#
# Expects: ids (comma-separated job ids).
# Prints:  SQUEUE <exit code>, then Q <id|state|reason|start|nodes> per line of squeue;
#          SACCT <exit code>, then A <id|state|exit code|nodes> per line of sacct (when some id
#          was missing from squeue).
: "${ids?}"
q=$(env SLURM_TIME_FORMAT=%s squeue -h -r -t all -j "$ids" -o '%i|%T|%r|%S|%N' 2>&1); qrc=$?
echo "SQUEUE $qrc"
printf '%s\n' "$q" | sed 's/^/Q /'
missing=
for id in $(printf '%s' "$ids" | tr ',' ' '); do
  case "
$q" in
    *"
$id|"* | *"
${id}_"*) ;;
    *) missing="$missing${missing:+,}$id" ;;
  esac
done
if [ -n "$missing" ]; then
  a=$(sacct -X -n -P -j "$missing" -o JobID,State,ExitCode,NodeList 2>&1); arc=$?
  echo "SACCT $arc"
  printf '%s\n' "$a" | sed 's/^/A /'
fi
