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
#          put on PYTHONPATH and PATH; empty: none), keep (how many images the cache keeps),
#          instance (an allocation's Apptainer instance name; empty: none, as for a job)
# Reads:   SLURM_TOOLS_CONTAINER_WRITABLE (1: a writable tmpfs over the image, gone with the
#          command), SLURM_TOOLS_INSTANCE_HOLD (a directory on the shared filesystem: hold the
#          instance on this node instead of running a command, see below),
#          SLURM_TOOLS_NO_INSTANCE (1: run in the image, as for a job, without looking for the
#          instance: slurm-alloc's check of the image before the instances start)
# Arguments: the command to run in the container, and its arguments.
# The allocation's instance (slurm-alloc): run with SLURM_TOOLS_INSTANCE_HOLD set, in a step of
# one task per node that lasts as long as the allocation, the launcher starts the instance named
# `instance` on its node with a writable overlay in the node's temporary directory (what commands
# change in the container stays on that node until `down`), writes HOLD/HOST.ready (or
# HOST.failed: an image without Apptainer's start action, an enroot .sqsh say; the task then
# ends with 0, so a site's KillOnBadExit ends no other node's holder), and holds it until the step is signalled or the instance stops, then stops it and
# removes the overlay. Run without it while the instance runs on the node, the command runs in
# the instance (`apptainer exec instance://NAME`: mounts, GPUs and overlay as the instance
# started); where it does not run, in the image, as for a job, saying so.
# Prints (stderr, for slurm-watch and the report; the pull's own output follows its line):
#   slurm-tools: container: pulling IMAGE DIGEST into FILE
#   slurm-tools: container: pulled IMAGE DIGEST into FILE in SECONDS s
#   slurm-tools: container: waited SECONDS s for another job's pull of IMAGE DIGEST into FILE
#   slurm-tools: container: cache hit IMAGE DIGEST at FILE
#   slurm-tools: container: uncached IMAGE (REASON)
#   slurm-tools: container: removed the cached image FILE (REASON)
#   slurm-tools: container: could not pull IMAGE DIGEST (the pull's own output above)
#   slurm-tools: container: could not pull IMAGE (the registry has no such image: URL answered 404)
#   slurm-tools: container: instance NAME started on HOST with its overlay OVERLAY
#   slurm-tools: container: could not start instance NAME on HOST (the runtime's own output above)
#   slurm-tools: container: instance NAME is not running on HOST: the command runs in the image
# Needs: image-cache.sh before it (resolve_digest, fill_cache, mark_use, prune_images).
# Exits: the command's exit code; 125 when the image cannot be pulled or the runtime is missing.
: "${image:?}" "${cache:?}" "${workdir?}" "${gpus?}" "${binds?}" "${packages?}" "${keep:?}" "${instance?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
say() { printf 'slurm-tools: container: %s\n' "$*" >&2; }
# shellcheck disable=SC2317 # a script that includes this file may not call it
first_task() { [ "${SLURM_PROCID:-0}" = 0 ]; }
if command -v apptainer >/dev/null 2>&1; then prog=apptainer
elif command -v singularity >/dev/null 2>&1; then prog=singularity
else
  say "neither apptainer nor singularity is on PATH on $(hostname) (the nodes need what preflight found on the login node)"
  exit 125
fi
# shellcheck disable=SC2317 # a script that includes this file may not call it
quiet() { first_task; }
hold=${SLURM_TOOLS_INSTANCE_HOLD:-}
# shellcheck disable=SC2317 # a script that includes this file may not call it
with_packages() {
  [ -n "$packages" ] || return 0
  export APPTAINERENV_PYTHONPATH="$packages${PYTHONPATH:+:$PYTHONPATH}" APPTAINERENV_PREPEND_PATH="$packages/bin"
  export SINGULARITYENV_PYTHONPATH="$APPTAINERENV_PYTHONPATH" SINGULARITYENV_PREPEND_PATH="$packages/bin"
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
instance_runs() { "$prog" instance list "$instance" 2>/dev/null | grep -q "^${instance}[[:space:]]"; }
if [ -n "$instance" ] && [ -z "$hold" ] && [ "${SLURM_TOOLS_NO_INSTANCE:-}" != 1 ]; then
  if instance_runs; then
    with_packages
    exec "$prog" --quiet exec --pwd "${workdir:-$PWD}" "instance://$instance" "$@"
  fi
  say "instance $instance is not running on $(hostname): the command runs in the image (what it changes in the container is not kept)"
fi
# shellcheck disable=SC2317 # a script that includes this file may not call it
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
if [ "${SLURM_TOOLS_CONTAINER_WRITABLE:-}" = 1 ] && [ -z "$hold" ]; then set -- --writable-tmpfs "$@"; fi
if [ -n "$packages" ]; then set -- --bind "$packages:$packages" "$@"; fi
with_packages
if [ -n "$binds" ]; then set -- --bind "$binds" "$@"; fi
[ -n "$hold" ] || exec "$prog" --quiet exec --pwd "${workdir:-$PWD}" "$@"

# Holding the allocation's instance on this node ("$@" is the options, the image file and the
# command, which the holder's caller leaves empty).
: "${instance:?an instance name, to hold one}"
host=$(hostname)
overlay=${TMPDIR:-/tmp}/slurm-tools-$(id -u)-$instance
# shellcheck disable=SC2317 # a script that includes this file may not call it
stop_instance() {
  "$prog" --quiet instance stop "$instance" >/dev/null 2>&1
  rm -rf -- "$overlay"
}
trap 'stop_instance; exit 0' TERM INT HUP
mkdir -p -- "$hold" "$overlay" || { : >"$hold/$host.failed"; exit 0; }
# A leftover of an earlier holder of the same allocation on this node goes first.
instance_runs && "$prog" --quiet instance stop "$instance" >/dev/null 2>&1
if ! "$prog" --quiet instance start --overlay "$overlay" "$@" "$instance"; then
  say "could not start instance $instance on $host (the runtime's own output above)"
  rm -rf -- "$overlay"
  : >"$hold/$host.failed"
  exit 0
fi
say "instance $instance started on $host with its overlay $overlay"
: >"$hold/$host.ready"
while instance_runs; do
  sleep 10 &
  wait $!
done
stop_instance
