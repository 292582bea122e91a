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
#   slurm-tools: container: could not pull IMAGE DIGEST (apptainer's reason above)
#   slurm-tools: container: could not pull IMAGE (the registry has no such image: URL answered 404)
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
no_https=
# The content digest of a registry image, from the registry's manifest (a HEAD request, with an
# anonymous token where the registry asks for one); sets digest and no_https, or why.
resolve_digest() {
  digest='' why=''
  ref=${image#docker://}
  host=${ref%%/*} path=${ref#*/}
  case $path in
    *@sha256:*) name=${path%@*} tag=${path#*@} ;;
    *:*) name=${path%:*} tag=${path##*:} ;;
    *) name=$path tag=latest ;;
  esac
  command -v curl >/dev/null 2>&1 || { why="no curl on $(hostname) to ask the registry for the digest"; return 1; }
  accept='application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json'
  for scheme in https http; do
    url="$scheme://$host/v2/$name/manifests/$tag"
    headers=$(curl -sSI --max-time 60 -H "Accept: $accept" "$url" 2>&1)
    rc=$?
    # Plain http only when the server does not speak TLS at all (curl 35), never after a
    # certificate that did not verify.
    if [ "$scheme" = https ] && [ "$rc" = 35 ]; then continue; fi
    [ "$rc" = 0 ] || { why="the registry did not answer ($url: $(printf '%s' "$headers" | tail -n 1))"; return 1; }
    [ "$scheme" = http ] && no_https=1
    status=$(printf '%s\n' "$headers" | awk 'NR == 1 { print $2 }')
    if [ "$status" = 401 ]; then
      challenge=$(printf '%s\n' "$headers" | tr -d '\r' | awk 'tolower($1) == "www-authenticate:" { $1 = ""; print; exit }')
      realm=$(printf '%s\n' "$challenge" | sed -n 's/.*realm="\([^"]*\)".*/\1/p')
      service=$(printf '%s\n' "$challenge" | sed -n 's/.*service="\([^"]*\)".*/\1/p')
      scope=$(printf '%s\n' "$challenge" | sed -n 's/.*scope="\([^"]*\)".*/\1/p')
      [ -n "$realm" ] || { why="the registry wants a login ($url answered 401)"; return 1; }
      token=$(curl -sSf --max-time 60 -G --data-urlencode "service=$service" --data-urlencode "scope=$scope" "$realm" 2>/dev/null \
        | sed -n 's/.*"\(access_\)\{0,1\}token" *: *"\([^"]*\)".*/\2/p' | head -n 1)
      [ -n "$token" ] || { why="the registry wants a login for $name (no anonymous token from $realm)"; return 1; }
      headers=$(curl -sSI --max-time 60 -H "Accept: $accept" -H "Authorization: Bearer $token" "$url" 2>&1)
      status=$(printf '%s\n' "$headers" | awk 'NR == 1 { print $2 }')
    fi
    if [ "$status" = 404 ]; then
      say "could not pull $image (the registry has no such image: $url answered 404)"
      exit 125
    fi
    [ "$status" = 200 ] || { why="the registry answered $status for $url"; return 1; }
    digest=$(printf '%s\n' "$headers" | tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" { print $2; exit }')
    case $digest in sha256:*) return 0 ;; esac
    why="the registry's answer for $url names no digest" digest=
    return 1
  done
  why="the registry $host answers neither https nor http"
  return 1
}
# The cache keeps the `keep` most recently used images; older ones go, never one a job Slurm
# still has uses (each job that runs an image leaves its id in FILE.users/), nor the one in use.
prune_images() {
  n=0
  for f in "$cache"/*.sif; do [ -e "$f" ] && n=$((n + 1)); done
  [ "$n" -gt "$keep" ] || return 0
  live=$(squeue -h -u "$(id -un)" -o '%i' 2>/dev/null) || return 0
  n=0
  # Newest use first (each use touches its file); the names are digests (no blanks).
  # shellcheck disable=SC2045
  for f in $(ls -1t -- "$cache" 2>/dev/null); do
    case $f in *.sif) ;; *) continue ;; esac
    n=$((n + 1))
    used=''
    for u in "$cache/$f.users"/*; do
      [ -e "$u" ] || continue
      if printf '%s\n' "$live" | grep -qx -- "${u##*/}"; then used=1; else rm -f -- "$u"; fi
    done
    [ "$n" -gt "$keep" ] || continue
    [ "$cache/$f" = "$file" ] && continue
    [ -n "$used" ] && continue
    # Not while another job pulls or waits for it.
    [ -d "$cache/$f.lock" ] && continue
    rm -rf -- "${cache:?}/$f" "$cache/$f.ref" "$cache/$f.users"
    say "removed the cached image $cache/$f (least recently used; the cache keeps $keep)"
  done
  # What a killed pull left, a day on.
  find "$cache" -maxdepth 1 -name '*.part.*' -mmin +1440 -exec rm -f -- {} + 2>/dev/null
  return 0
}
file=$image
case $image in
  docker://*)
    ref=${image#docker://}
    case ${ref%%/*} in
      *.*|*:*|localhost) resolve_digest || { first_task && say "uncached $image ($why)"; } ;;
      *) digest='' why="no registry host in the reference: give host/path:tag to cache it"
         first_task && say "uncached $image ($why)" ;;
    esac
    if [ -n "$digest" ]; then
      mkdir -p -- "$cache" 2>/dev/null
      file="$cache/${digest#sha256:}.sif"
      lock="$file.lock" since=$(date +%s) locked='' waited=''
      until [ -s "$file" ]; do
        if mkdir -- "$lock" 2>/dev/null; then locked=1; break; fi
        # A pull keeps its lock fresh; one untouched for 5 minutes is a killed job's.
        if [ -n "$(find "$lock" -maxdepth 0 -mmin +5 2>/dev/null)" ]; then rm -rf -- "$lock"; continue; fi
        if [ -z "$waited" ] && first_task; then say "waiting for the pull of $image $digest into $file"; fi
        waited=1
        sleep 2
      done
      if [ -n "$locked" ] && [ -s "$file" ]; then rmdir -- "$lock" 2>/dev/null; locked=; fi
      if [ -n "$locked" ]; then
        say "pulling $image $digest into $file"
        ( while sleep 30; do touch -- "$lock" 2>/dev/null || exit 0; done ) &
        keeper=$!
        host=${ref%%/*} rest=${ref#*/}
        case $rest in *@*) rest=${rest%%@*} ;; *:*) rest=${rest%:*} ;; esac
        part="$file.part.$$"
        if "$prog" --quiet pull ${no_https:+--no-https} "$part" "docker://$host/$rest@$digest" </dev/null >&2 \
            && mv -f -- "$part" "$file"; then
          printf '%s\n' "$image" >"$file.ref" 2>/dev/null
          kill "$keeper" 2>/dev/null; rm -rf -- "$lock"
          say "pulled $image $digest into $file in $(( $(date +%s) - since )) s"
        else
          kill "$keeper" 2>/dev/null; rm -rf -- "$lock"; rm -f -- "$part"
          say "could not pull $image $digest (apptainer's reason above)"
          exit 125
        fi
      elif [ -n "$waited" ]; then
        first_task && say "waited $(( $(date +%s) - since )) s for the pull of $image $digest into $file"
      else
        first_task && say "cache hit $image $digest at $file"
      fi
      # Its last use and its user, for the cache's cleaning.
      touch -c -- "$file" 2>/dev/null
      if first_task; then
        mkdir -p -- "$file.users" 2>/dev/null && : >"$file.users/${SLURM_JOB_ID:-0}" 2>/dev/null
        prune_images
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
