# slurm-alloc down: release everything an allocation holds: its Apptainer instances and pyxis
# containers on every node (while it runs), its container files on the shared filesystem, its
# tmux session on the login node, and the job itself.
#
# Expects: session, name (the allocation's job name), job (its id; empty: found by name),
#          container_dir (the allocation's `slurm-tools-alloc/<job>` directory, or empty),
#          instance (its Apptainer instance, or empty); ov (overlap.sh), stop_instances
#          (alloc-instance-stop.sh), kill_session (tmux.sh).
# Prints:  LOGIN <host>, then one line per thing released: CONTAINER_REMOVED <name> on <node>,
#          INSTANCE_STOPPED ..., CONTAINER_FILES_REMOVED <dir>, SESSION_KILLED, CANCELLED <job>.
: "${session?}" "${name?}" "${job?}" "${container_dir?}" "${instance?}" "${ov?}"
me=$(id -un)
echo "LOGIN $(hostname 2>/dev/null)"
[ -n "$job" ] || job=$(squeue -h -u "$me" -o '%i|%j' 2>/dev/null | awk -F'|' -v n="$name" '$2 == n { print $1; exit }')
st=; [ -z "$job" ] || st=$(squeue -h -j "$job" -o '%T %D' 2>/dev/null | head -n 1)
if [ "${st%% *}" = RUNNING ]; then
  # pyxis names the enroot container pyxis_<jobid>_<name> (container_scope=job) or pyxis_<name>.
  # One step on every node of the allocation (its node count is the second word of st).
  nn=${st#* }
  [ -z "$instance" ] || stop_instances "$job" "$nn" "$instance"
  # shellcheck disable=SC2086
  srun $ov --jobid="$job" --nodes="$nn" --ntasks-per-node=1 sh -c 'command -v enroot >/dev/null 2>&1 || exit 0; enroot list 2>/dev/null | grep -Fx -e "pyxis_$1_slurm-tools-$1" -e "pyxis_slurm-tools-$1" -e "pyxis_$1_trtllm-$1" -e "pyxis_trtllm-$1" | while read -r c; do enroot remove -f -- "$c" >/dev/null 2>&1 && echo "CONTAINER_REMOVED $c on $(hostname)"; done' sh "$job" 2>/dev/null
fi
if [ -n "$container_dir" ] && [ -d "$container_dir" ]; then rm -rf -- "$container_dir" && echo "CONTAINER_FILES_REMOVED $container_dir"; fi
kill_session "$session" && echo "SESSION_KILLED"
if [ -n "$job" ] && [ -n "$(squeue -h -j "$job" -o '%T' 2>/dev/null)" ]; then scancel "$job" && echo "CANCELLED $job"; fi
exit 0
