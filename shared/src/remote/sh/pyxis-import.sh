# slurm-submit on pyxis: a registry image is imported with `enroot import` on the login node once
# per content digest into the image cache (as enroot's own documentation suggests for pyxis), and
# every job of that image starts from the file instead of importing it again on its nodes. Two
# submissions at once wait for one import. Without enroot or curl on the login node, or when the
# registry cannot tell the digest, the job runs uncached (pyxis imports the image in the job).
#
# Expects: image (host[:port]/path[:tag|@digest]), cache, keep, user (this submission's tag: its
#          mark on the file it uses), E_PULL (the image cannot be imported)
# Needs:   image-cache.sh before it.
# Prints (stdout, one per line): the image cache's lines (`slurm-tools: container: ...`), then
#          FILE <path>  (the file the job runs), or `slurm-tools: container: uncached IMAGE (REASON)`
# Exits:   E_PULL after "could not pull IMAGE ..." (enroot's output on stderr).
: "${image:?}" "${cache:?}" "${user:?}" "${E_PULL:?}"
digest='' why=''
# shellcheck disable=SC2317 # a script that includes this file may not call it
say() { printf 'slurm-tools: container: %s\n' "$*"; }
# shellcheck disable=SC2317 # a script that includes this file may not call it
quiet() { true; }
command -v enroot >/dev/null 2>&1 || { say "uncached $image (no enroot on the login node $(hostname): pyxis imports the image in each job)"; exit 0; }
resolve_digest "$image"
case $? in
  0) ;;
  2) say "could not pull $image ($why)"; exit "$E_PULL" ;;
  *) say "uncached $image ($why)"; exit 0 ;;
esac
file="$cache/${digest#sha256:}.sqsh"
host=${image%%/*} rest=${image#*/}
case $rest in *@*) rest=${rest%%@*} ;; *:*) rest=${rest%:*} ;; esac
# enroot's own form: the registry before '#', the image pinned to the digest just resolved.
# shellcheck disable=SC2317 # a script that includes this file may not call it
import_sqsh() { enroot import -o "$1" "docker://$host#$rest@$digest"; }
fill_cache "$image" "$file" import_sqsh || exit "$E_PULL"
mark_use "$file" "$user"
prune_images sqsh
echo "FILE $file"
