# slurm-submit: a sweep's job array checked against the cluster's MaxArraySize before it is
# submitted, so a sweep that is too big is refused naming the limit (sbatch alone says only
# "Invalid job array specification").
#
# Expects: array_last (the array's last index), E_ARRAY_TOO_BIG
# Prints:  ARRAY_TOO_BIG <MaxArraySize> when the last index is not below MaxArraySize; nothing
#          otherwise (also when scontrol does not say: sbatch decides then).
# Exits:   E_ARRAY_TOO_BIG after ARRAY_TOO_BIG.
: "${array_last:?}" "${E_ARRAY_TOO_BIG:?}"
max=$(scontrol show config 2>/dev/null | sed -n 's/^MaxArraySize *= *\([0-9][0-9]*\).*/\1/p' | head -n 1)
if [ -n "$max" ] && [ "$array_last" -ge "$max" ]; then
  echo "ARRAY_TOO_BIG $max"
  exit "$E_ARRAY_TOO_BIG"
fi
