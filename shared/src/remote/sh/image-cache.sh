# The image cache shared by both container runtimes: one file per content digest on the
# cluster's shared filesystem (Apptainer's `<digest>.sif`, enroot's `<digest>.sqsh`), made once
# under a lock so that jobs and submissions that start together wait for one pull instead of
# pulling in parallel, kept to the `keep` most recently used, never removing one a job Slurm still
# has uses.
#
# Expects: cache (the image cache directory), keep (how many images of one kind it keeps), a
#          function `say` (prints one `slurm-tools: container: ...` line) and a function `quiet`
#          (true where the hit and wait lines are said: one task of a job says them, not every).
# Defines: resolve_digest REF        REF is host[:port]/path[:tag|@digest]; sets digest (sha256:..)
#                                    and no_https (1: the registry speaks only plain http); status
#                                    1 with `why` set when it cannot tell (then run uncached), 2
#                                    when the registry has no such image (`why` says so)
#          fill_cache IMAGE FILE PULL  makes FILE unless it is there: `PULL PART` (a command that
#                                    writes the image to the file PART) under FILE.lock; says
#                                    pulling/pulled, waiting/waited or cache hit; status 1 when
#                                    the pull failed (its own output before, "could not pull")
#          mark_use FILE USER        FILE's last use now, and USER (a job id or a submission's
#                                    tag) among its users
#          prune_images EXT          the cache's cleaning (FILE of the image in use is kept)
# Prints (through say): the lines slurm-watch and slurm-submit read:
#   pulling IMAGE DIGEST into FILE / pulled IMAGE DIGEST into FILE in SECONDS s
#   waiting for the pull of IMAGE DIGEST into FILE / waited SECONDS s for the pull of IMAGE DIGEST into FILE
#   cache hit IMAGE DIGEST at FILE / could not pull IMAGE DIGEST / removed the cached image FILE (REASON)
: "${cache:?}" "${keep:?}"
no_https=
# shellcheck disable=SC2317 # a script that includes this file may not call it
resolve_digest() {
  digest='' why=''
  rd_host=${1%%/*} rd_path=${1#*/}
  case $rd_path in
    *@sha256:*) rd_name=${rd_path%@*} rd_tag=${rd_path#*@} ;;
    *:*) rd_name=${rd_path%:*} rd_tag=${rd_path##*:} ;;
    *) rd_name=$rd_path rd_tag=latest ;;
  esac
  command -v curl >/dev/null 2>&1 || { why="no curl on $(hostname) to ask the registry for the digest"; return 1; }
  rd_accept='application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json'
  for rd_scheme in https http; do
    rd_url="$rd_scheme://$rd_host/v2/$rd_name/manifests/$rd_tag"
    rd_headers=$(curl -sSI --max-time 60 -H "Accept: $rd_accept" "$rd_url" 2>&1)
    rd_rc=$?
    # Plain http only when the server does not speak TLS at all (curl 35), never after a
    # certificate that did not verify.
    if [ "$rd_scheme" = https ] && [ "$rd_rc" = 35 ]; then continue; fi
    [ "$rd_rc" = 0 ] || { why="the registry did not answer ($rd_url: $(printf '%s' "$rd_headers" | tail -n 1))"; return 1; }
    [ "$rd_scheme" = http ] && no_https=1
    rd_status=$(printf '%s\n' "$rd_headers" | awk 'NR == 1 { print $2 }')
    if [ "$rd_status" = 401 ]; then
      rd_challenge=$(printf '%s\n' "$rd_headers" | tr -d '\r' | awk 'tolower($1) == "www-authenticate:" { $1 = ""; print; exit }')
      rd_realm=$(printf '%s\n' "$rd_challenge" | sed -n 's/.*realm="\([^"]*\)".*/\1/p')
      rd_service=$(printf '%s\n' "$rd_challenge" | sed -n 's/.*service="\([^"]*\)".*/\1/p')
      rd_scope=$(printf '%s\n' "$rd_challenge" | sed -n 's/.*scope="\([^"]*\)".*/\1/p')
      [ -n "$rd_realm" ] || { why="the registry wants a login ($rd_url answered 401)"; return 1; }
      rd_token=$(curl -sSf --max-time 60 -G --data-urlencode "service=$rd_service" --data-urlencode "scope=$rd_scope" "$rd_realm" 2>/dev/null \
        | sed -n 's/.*"\(access_\)\{0,1\}token" *: *"\([^"]*\)".*/\2/p' | head -n 1)
      [ -n "$rd_token" ] || { why="the registry wants a login for $rd_name (no anonymous token from $rd_realm)"; return 1; }
      rd_headers=$(curl -sSI --max-time 60 -H "Accept: $rd_accept" -H "Authorization: Bearer $rd_token" "$rd_url" 2>&1)
      rd_status=$(printf '%s\n' "$rd_headers" | awk 'NR == 1 { print $2 }')
    fi
    if [ "$rd_status" = 404 ]; then
      why="the registry has no such image: $rd_url answered 404"
      return 2
    fi
    [ "$rd_status" = 200 ] || { why="the registry answered $rd_status for $rd_url"; return 1; }
    digest=$(printf '%s\n' "$rd_headers" | tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" { print $2; exit }')
    case $digest in sha256:*) return 0 ;; esac
    why="the registry's answer for $rd_url names no digest" digest=
    return 1
  done
  why="the registry $rd_host answers neither https nor http"
  return 1
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
fill_cache() {
  fc_image=$1 fc_file=$2 fc_pull=$3
  fc_lock="$fc_file.lock" fc_since=$(date +%s) fc_locked='' fc_waited=''
  mkdir -p -- "$cache" 2>/dev/null
  until [ -s "$fc_file" ]; do
    if mkdir -- "$fc_lock" 2>/dev/null; then fc_locked=1; break; fi
    # A pull keeps its lock fresh; one untouched for 5 minutes is a killed pull's.
    if [ -n "$(find "$fc_lock" -maxdepth 0 -mmin +5 2>/dev/null)" ]; then rm -rf -- "$fc_lock"; continue; fi
    if [ -z "$fc_waited" ] && quiet; then say "waiting for the pull of $fc_image $digest into $fc_file"; fi
    fc_waited=1
    sleep 2
  done
  if [ -n "$fc_locked" ] && [ -s "$fc_file" ]; then rmdir -- "$fc_lock" 2>/dev/null; fc_locked=; fi
  if [ -n "$fc_locked" ]; then
    say "pulling $fc_image $digest into $fc_file"
    # Its output nowhere: a `sleep` left running after the kill must not hold the caller's
    # stdout open (an ssh session, a job step), which would wait for it.
    ( while sleep 30; do touch -- "$fc_lock" 2>/dev/null || exit 0; done ) </dev/null >/dev/null 2>&1 &
    fc_keeper=$!
    fc_part="$fc_file.part.$$"
    if "$fc_pull" "$fc_part" </dev/null >&2 && mv -f -- "$fc_part" "$fc_file"; then
      printf '%s\n' "$fc_image" >"$fc_file.ref" 2>/dev/null
      kill "$fc_keeper" 2>/dev/null; rm -rf -- "$fc_lock"
      say "pulled $fc_image $digest into $fc_file in $(( $(date +%s) - fc_since )) s"
    else
      kill "$fc_keeper" 2>/dev/null; rm -rf -- "$fc_lock"; rm -rf -- "$fc_part"
      say "could not pull $fc_image $digest (the pull's own output above)"
      return 1
    fi
  elif [ -n "$fc_waited" ]; then
    quiet && say "waited $(( $(date +%s) - fc_since )) s for the pull of $fc_image $digest into $fc_file"
  else
    quiet && say "cache hit $fc_image $digest at $fc_file"
  fi
  return 0
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
mark_use() {
  touch -c -- "$1" 2>/dev/null
  mkdir -p -- "$1.users" 2>/dev/null && : >"$1.users/$2" 2>/dev/null
  return 0
}
# Older ones go first; never one a job Slurm still has uses (its id or its submission's tag is
# in FILE.users/), nor `file`, nor one being pulled.
# shellcheck disable=SC2317 # a script that includes this file may not call it
prune_images() {
  pi_n=0
  for pi_f in "$cache"/*."$1"; do [ -e "$pi_f" ] && pi_n=$((pi_n + 1)); done
  [ "$pi_n" -gt "$keep" ] || return 0
  # Each job's id and the words of its comment (a submission's tag follows the person's own
  # comment after a `;`), one per line.
  pi_live=$(squeue -h -u "$(id -un)" -o '%i %k' 2>/dev/null | awk '{ n = split($0, w, /[ ;]/); for (i = 1; i <= n; i++) print w[i] }') || return 0
  pi_n=0
  # Newest use first (each use touches its file); the names are digests (no blanks).
  # shellcheck disable=SC2045
  for pi_f in $(ls -1t -- "$cache" 2>/dev/null); do
    case $pi_f in *."$1") ;; *) continue ;; esac
    pi_n=$((pi_n + 1))
    pi_used=''
    for pi_u in "$cache/$pi_f.users"/*; do
      [ -e "$pi_u" ] || continue
      if printf '%s\n' "$pi_live" | grep -qx -- "${pi_u##*/}"; then pi_used=1; else rm -f -- "$pi_u"; fi
    done
    [ "$pi_n" -gt "$keep" ] || continue
    [ "$cache/$pi_f" = "${file:-}" ] && continue
    [ -n "$pi_used" ] && continue
    [ -d "$cache/$pi_f.lock" ] && continue
    rm -rf -- "${cache:?}/$pi_f" "$cache/$pi_f.ref" "$cache/$pi_f.users"
    say "removed the cached image $cache/$pi_f (least recently used; the cache keeps $keep)"
  done
  # What a killed pull left, a day on.
  find "$cache" -maxdepth 1 -name '*.part.*' -mmin +1440 -exec rm -rf -- {} + 2>/dev/null
  return 0
}
