# The job's container on Apptainer (or Singularity): runs its arguments inside the image, in
# every task, with the document's `mounts` bound and the job's directory as the working
# directory. A registry image is pulled and converted to a SIF file once per content digest into
# the user's image cache on the shared filesystem, under a lock, so jobs that start together
# wait for one pull instead of pulling in parallel; every later job (and task) runs the file.
#
# Expects: image (docker://HOST/PATH[:TAG|@DIGEST], or a file: .sif, .sqsh, a sandbox
#          directory), cache (the image cache directory), binds (src:dst[:opts],... or empty),
#          workdir (empty: the directory it is started in), gpus (1: --nv), packages (a
#          directory of Python packages installed with pip --target, bound at the same path and
#          put on PYTHONPATH and PATH; empty: none), keep (how many images the cache keeps)
# Reads:   SLURM_TOOLS_CONTAINER_WRITABLE (1: a writable tmpfs over the image, gone with the
#          command)
# Arguments: the command to run in the container, and its arguments.
# Prints (stderr, for slurm-watch and the report; the pull's own output follows its line):
#   slurm-tools: container: pulling IMAGE DIGEST into FILE
#   slurm-tools: container: pulled IMAGE DIGEST into FILE in SECONDS s
#   slurm-tools: container: waited SECONDS s for another job's pull of IMAGE DIGEST into FILE
#   slurm-tools: container: cache hit IMAGE DIGEST at FILE
#   slurm-tools: container: uncached IMAGE (REASON)
#   slurm-tools: container: removed the cached image FILE (REASON)
#   slurm-tools: container: could not pull IMAGE DIGEST (the pull's own output above)
#   slurm-tools: container: could not pull IMAGE (the registry has no such image: URL answered 404)
# Needs: image-cache.sh before it (resolve_digest, fill_cache, mark_use, prune_images).
# Exits: the command's exit code; 125 when the image cannot be pulled or the runtime is missing.
: "${image:?}" "${cache:?}" "${workdir?}" "${gpus?}" "${binds?}" "${packages?}" "${keep:?}"
say() { printf 'slurm-tools: container: %s\n' "$*" >&2; }
first_task() { [ "${SLURM_PROCID:-0}" = 0 ]; }
if command -v apptainer >/dev/null 2>&1; then prog=apptainer
elif command -v singularity >/dev/null 2>&1; then prog=singularity
else
  say "neither apptainer nor singularity is on PATH on $(hostname) (the nodes need what preflight found on the login node)"
  exit 125
fi
quiet() { first_task; }
pull_sif() { "$prog" --quiet pull ${no_https:+--no-https} "$1" "docker://$pull_ref@$digest"; }
file=$image
case $image in
  docker://*)
    ref=${image#docker://}
    if [ "$keep" = 0 ]; then
      digest='' why="image_cache_keep is 0: no image cache"
      first_task && say "uncached $image ($why)"
    else
      case ${ref%%/*} in
        *.*|*:*|localhost)
          resolve_digest "$ref"
          case $? in
            0) ;;
            2) say "could not pull $image ($why)"; exit 125 ;;
            *) first_task && say "uncached $image ($why)" ;;
          esac ;;
        *) digest='' why="no registry host in the reference: give host/path:tag to cache it"
           first_task && say "uncached $image ($why)" ;;
      esac
    fi
    if [ -n "$digest" ]; then
      file="$cache/${digest#sha256:}.sif"
      # The image pinned to the digest just resolved (the tag or digest written dropped).
      rest=${ref#*/}
      case $rest in *@*) rest=${rest%%@*} ;; *:*) rest=${rest%:*} ;; esac
      pull_ref=${ref%%/*}/$rest
      fill_cache "$image" "$file" pull_sif || exit 125
      # Its last use and its user, for the cache's cleaning.
      if first_task; then
        mark_use "$file" "${SLURM_JOB_ID:-0}"
        prune_images sif
      else
        touch -c -- "$file" 2>/dev/null
      fi
    elif [ -n "$no_https" ]; then
      export APPTAINER_NOHTTPS=1 SINGULARITY_NOHTTPS=1
    fi
    ;;
esac
set -- "$file" "$@"
if [ "$gpus" = 1 ]; then set -- --nv "$@"; fi
if [ "${SLURM_TOOLS_CONTAINER_WRITABLE:-}" = 1 ]; then set -- --writable-tmpfs "$@"; fi
if [ -n "$packages" ]; then
  set -- --bind "$packages:$packages" "$@"
  export APPTAINERENV_PYTHONPATH="$packages${PYTHONPATH:+:$PYTHONPATH}" APPTAINERENV_PREPEND_PATH="$packages/bin"
  export SINGULARITYENV_PYTHONPATH="$APPTAINERENV_PYTHONPATH" SINGULARITYENV_PREPEND_PATH="$packages/bin"
fi
if [ -n "$binds" ]; then set -- --bind "$binds" "$@"; fi
exec "$prog" --quiet exec --pwd "${workdir:-$PWD}" "$@"
