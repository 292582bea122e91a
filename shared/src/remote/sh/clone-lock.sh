# The remote clone's lock: one step at a time changes or reads the clone's working tree (the
# tracked sync's checkout, the untracked sync's extraction), so concurrent pipelines into one
# clone take turns instead of failing or interleaving. A directory made with mkdir (atomic on
# every filesystem, NFS and Lustre without flock too) beside the clone.
#
# Expects: repo (the clone), token (this run's own name: unique per run), lock_wait (seconds to
#          wait for another run's lock), E_LOCKED (the exit code when it is still held then).
# Defines: take_lock (waits; exits E_LOCKED after lock_wait s), release_lock (only our own),
#          keep_lock (a later step of the same run: exits E_LOST_LOCK unless the lock is still ours),
#          release_on_failure (an EXIT trap that gives the lock back only when the script failed).
# Prints:  BROKE_STALE_LOCK <owner>        a lock older than 30 min (a killed run's) was removed
#          WAITED <seconds> <owner>        another run held it; this one waited that long
#          LOCKED <seconds> <owner>        still held after lock_wait seconds (then exits)
#          LOST_LOCK                       keep_lock found the lock not ours (then exits)
: "${repo:?}" "${token:?}" "${lock_wait:?}" "${E_LOCKED:?}"
lock="${repo%/}.slurm-tools-sync.lock"
lock_nap() { sleep 0.2 2>/dev/null || sleep 1; }
take_lock() {
  lock_since=$(date +%s) lock_waited=0 lock_holder=
  until mkdir -- "$lock" 2>/dev/null; do
    lock_holder=$(head -n 1 "$lock/owner" 2>/dev/null)
    if [ -n "$(find "$lock" -maxdepth 0 -mmin +30 2>/dev/null)" ]; then
      echo "BROKE_STALE_LOCK $lock_holder"
      rm -rf -- "$lock"
      continue
    fi
    lock_waited=$(( $(date +%s) - lock_since ))
    if [ "$lock_waited" -ge "$lock_wait" ]; then
      echo "LOCKED $lock_waited $lock_holder"
      exit "$E_LOCKED"
    fi
    lock_nap
  done
  printf '%s\n' "$token" >"$lock/owner"
  lock_waited=$(( $(date +%s) - lock_since ))
  if [ -n "$lock_holder" ] || [ "$lock_waited" -gt 0 ]; then
    echo "WAITED $lock_waited ${lock_holder:-another run}"
  fi
}
release_lock() {
  if [ "$(head -n 1 "$lock/owner" 2>/dev/null)" = "$token" ]; then rm -rf -- "$lock"; fi
}
keep_lock() {
  if [ "$(head -n 1 "$lock/owner" 2>/dev/null)" != "$token" ]; then echo "LOST_LOCK"; exit "$E_LOST_LOCK"; fi
}
release_on_failure() { rc=$?; [ "$rc" = 0 ] || release_lock; exit "$rc"; }
