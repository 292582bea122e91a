# slurm-alloc up on Apptainer: writes the allocation's launcher (apptainer-run.sh with its values),
# runs it once on every node of the allocation (the first pulls the image into the image cache,
# the others wait for that pull; each checks the image starts there), starts the allocation's
# named instance on every node (a step of one task per node, detached from this ssh session, that
# holds it for the allocation's life: an instance a step leaves behind is otherwise killed with
# the step, or, where Slurm does not track it, outlives the allocation), waits until every node
# has it or has said it cannot start it (an image without Apptainer's start action: commands there
# run in the image, as the launcher says each time), then installs the packages once, on one node, with pip --target into a directory on the
# shared filesystem every node's instance sees.
#
# Expects: job, dir (the allocation's container files), launcher (its path), launcher_text,
#          packages_dir (empty: no packages), nn (the allocation's node count), ov (srun's
#          --overlap where it has it), wait_seconds (how long the instances may take to start),
#          E_IMPORT, E_PACKAGES, E_NO_PYTHON
# Arguments: the packages (pip requirement words).
# Prints: INSTANCE_FAILED HOST for each node whose instance did not start, and
#         INSTANCE_WHY LINE (the runtime's first FATAL or ERROR line) when there is one;
#         on stderr, the holder's output when the instances could not be waited for.
# Exits: E_IMPORT (the image or its instance did not start on a node), E_NO_PYTHON, E_PACKAGES.
: "${job:?}" "${dir:?}" "${launcher:?}" "${launcher_text:?}" "${packages_dir?}" "${nn:?}" "${ov?}"
: "${wait_seconds:?}" "${E_IMPORT:?}" "${E_PACKAGES:?}" "${E_NO_PYTHON:?}"
mkdir -p -- "$dir" ${packages_dir:+"$packages_dir"} && printf '%s' "$launcher_text" >"$launcher" || exit "$E_IMPORT"
# shellcheck disable=SC2086
SLURM_TOOLS_NO_INSTANCE=1 srun $ov --jobid="$job" --nodes="$nn" --ntasks-per-node=1 /bin/sh "$launcher" true || exit "$E_IMPORT"

# The instance holders. An earlier `up`'s holder of this allocation (killed before it finished)
# goes first, so one holder per node remains.
hold=$dir/instances
if [ -f "$hold.pid" ] && read -r old <"$hold.pid" && kill "$old" 2>/dev/null; then
  t=0
  while kill -0 "$old" 2>/dev/null && [ "$t" -lt 30 ]; do sleep 1; t=$((t + 1)); done
fi
rm -rf -- "$hold" && mkdir -p -- "$hold" || exit "$E_IMPORT"
detach=; command -v setsid >/dev/null 2>&1 && detach=setsid
# shellcheck disable=SC2086
SLURM_TOOLS_INSTANCE_HOLD=$hold nohup $detach srun $ov --jobid="$job" --nodes="$nn" --ntasks-per-node=1 \
  --kill-on-bad-exit=0 --job-name=slurm-tools-instances /bin/sh "$launcher" </dev/null >"$hold.log" 2>&1 &
echo $! >"$hold.pid"
t=0
while :; do
  said=$(find "$hold" \( -name '*.ready' -o -name '*.failed' \) 2>/dev/null | wc -l)
  [ "$said" -ge "$nn" ] && break
  if ! kill -0 "$(cat "$hold.pid")" 2>/dev/null || [ "$t" -ge "$wait_seconds" ]; then
    echo "slurm-tools: container: the allocation's instances did not start within $wait_seconds s ($said of $nn nodes said how they went); the holder's output:" >&2
    cat "$hold.log" >&2
    exit "$E_IMPORT"
  fi
  sleep 1
  t=$((t + 1))
done
for f in "$hold"/*.failed; do
  [ -e "$f" ] || continue
  f=${f##*/}
  echo "INSTANCE_FAILED ${f%.failed}"
done
if [ -n "$(find "$hold" -name '*.failed')" ]; then
  why=$(grep -m 1 -E 'FATAL|ERROR' "$hold.log")
  [ -z "$why" ] || echo "INSTANCE_WHY $why"
fi

if [ -n "$packages_dir" ]; then
  # shellcheck disable=SC2016,SC2086
  srun $ov --jobid="$job" --nodes=1 --ntasks=1 /bin/sh "$launcher" sh -c 'command -v python3 >/dev/null 2>&1 || exit 97; t=$1; shift; exec python3 -m pip install --target "$t" "$@"' sh "$packages_dir" "$@"
  case $? in 0) ;; 97) exit "$E_NO_PYTHON" ;; *) exit "$E_PACKAGES" ;; esac
fi
