# slurm-alloc up on Apptainer: writes the allocation's launcher (apptainer-run.sh with its values),
# runs it once on every node of the allocation (the first pulls the image into the image cache,
# the others wait for that pull; each checks the image starts there), then installs the packages
# once, on one node, with pip --target into a directory on the shared filesystem every node's
# container sees.
#
# Expects: job, dir (the allocation's container files), launcher (its path), launcher_text,
#          packages_dir (empty: no packages), nn (the allocation's node count), ov (srun's
#          --overlap where it has it), E_IMPORT, E_PACKAGES, E_NO_PYTHON
# Arguments: the packages (pip requirement words).
# Exits: E_IMPORT (the image did not start on a node), E_NO_PYTHON, E_PACKAGES.
: "${job:?}" "${dir:?}" "${launcher:?}" "${launcher_text:?}" "${packages_dir?}" "${nn:?}" "${ov?}"
: "${E_IMPORT:?}" "${E_PACKAGES:?}" "${E_NO_PYTHON:?}"
mkdir -p -- "$dir" ${packages_dir:+"$packages_dir"} && printf '%s' "$launcher_text" >"$launcher" || exit "$E_IMPORT"
# shellcheck disable=SC2086
srun $ov --jobid="$job" --nodes="$nn" --ntasks-per-node=1 /bin/sh "$launcher" true || exit "$E_IMPORT"
if [ -n "$packages_dir" ]; then
  # shellcheck disable=SC2016,SC2086
  srun $ov --jobid="$job" --nodes=1 --ntasks=1 /bin/sh "$launcher" sh -c 'command -v python3 >/dev/null 2>&1 || exit 97; t=$1; shift; exec python3 -m pip install --target "$t" "$@"' sh "$packages_dir" "$@"
  case $? in 0) ;; 97) exit "$E_NO_PYTHON" ;; *) exit "$E_PACKAGES" ;; esac
fi
