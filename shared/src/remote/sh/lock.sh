# One lock for every remote step that must run one at a time: the remote clone's (the tracked
# sync's checkout, the untracked sync's extraction: concurrent pipelines into one clone take
# turns instead of failing or interleaving) and a submission's (one per tag: a rerun never
# submits twice). A directory made with mkdir (atomic on every filesystem, NFS and Lustre
# included) holding an owner file, "TOKEN PID HOST". The policy is in the parameters, set by
# shared::remote::Lock.
#
# Expects: lock (the lock directory; its parent exists), token (this run's own name), lock_wait
#          (seconds to wait for another run's lock), lock_stale (minutes after which a lock is
#          taken to be a killed run's and broken), lock_by_pid (yes: a lock whose owner process
#          is gone from this host is broken at once; no: the lock outlives the execution that
#          took it, and later executions of the same run keep it), lock_exit_wait (the exit code
#          when it is still held after lock_wait s), lock_exit_failed (when it cannot be made at
#          all).
# Defines: take_lock, release_lock (only our own), keep_lock CODE (a later execution of the same
#          run: exits CODE unless the lock is still ours), release_on_failure (an EXIT trap that
#          gives the lock back only when the script failed); lock_host (this host's name).
# Prints:  BROKE_STALE_LOCK <owner>        a killed run's lock was removed
#          WAITED <seconds> <owner>        another run held it; this one waited that long
#          LOCKED <seconds> <owner>        still held after lock_wait seconds (then exits)
#          LOCK_FAILED <lock>              it cannot be made (then exits)
#          LOST_LOCK                       keep_lock found the lock not ours (then exits)
: "${lock?}" "${token?}" "${lock_wait?}" "${lock_stale?}" "${lock_by_pid?}" "${lock_exit_wait?}" "${lock_exit_failed?}"
# This host's name: the kernel's, read without starting a process where /proc has it.
{ IFS= read -r lock_host </proc/sys/kernel/hostname; } 2>/dev/null || lock_host=$(hostname 2>/dev/null)
# shellcheck disable=SC2317 # a script that includes this file may not call it
lock_nap() { sleep "$1" 2>/dev/null || sleep 1; }
# shellcheck disable=SC2317 # a script that includes this file may not call it
lock_owner() { head -n 1 "$lock/owner" 2>/dev/null; }
# shellcheck disable=SC2317 # a script that includes this file may not call it
lock_is_stale() { # OWNER
  if [ -n "$(find "$lock" -maxdepth 0 -mmin +"$lock_stale" 2>/dev/null)" ]; then return 0; fi
  [ "$lock_by_pid" = yes ] || return 1
  # "TOKEN PID HOST", or an older version's "PID HOST".
  case $1 in
    *" "*" "*) lock_rest=${1#* } ;;
    *" "*) lock_rest=$1 ;;
    *) return 1 ;;
  esac
  [ "${lock_rest#* }" = "$lock_host" ] && ! kill -0 "${lock_rest%% *}" 2>/dev/null
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
take_lock() {
  lock_since='' lock_waited=0 lock_holder='' lock_gone=0 lock_held=no lock_naps=0
  until mkdir -- "$lock" 2>/dev/null; do
    # The clock is read only when there is a wait to time.
    [ -n "$lock_since" ] || lock_since=$(date +%s)
    lock_held=yes
    # Not there although mkdir failed: released between the two looks (try again), or it cannot
    # be made at all (the third time in a row).
    if [ ! -d "$lock" ]; then
      lock_gone=$((lock_gone + 1))
      if [ "$lock_gone" -ge 3 ]; then echo "LOCK_FAILED $lock"; exit "$lock_exit_failed"; fi
      continue
    fi
    lock_gone=0
    # The holder as last seen: a look that finds no owner line (the holder is removing the lock
    # right now, owner file first) keeps the name seen before.
    lock_seen=$(lock_owner)
    [ -z "$lock_seen" ] || lock_holder=$lock_seen
    if lock_is_stale "$lock_seen"; then
      echo "BROKE_STALE_LOCK $lock_seen"
      rm -rf -- "$lock"
      continue
    fi
    lock_waited=$(( $(date +%s) - lock_since ))
    if [ "$lock_waited" -ge "$lock_wait" ]; then
      echo "LOCKED $lock_waited $lock_holder"
      exit "$lock_exit_wait"
    fi
    # Short looks first (a holder about to end: often this run's own look at the clone), then
    # 0.2 s ones.
    lock_naps=$((lock_naps + 1))
    if [ "$lock_naps" -le 10 ]; then lock_nap 0.02; else lock_nap 0.2; fi
  done
  printf '%s %s %s\n' "$token" "$$" "$lock_host" >"$lock/owner"
  # Said only when another run held it (a second that ticks over while taking a free lock is no
  # wait, and this run's own earlier execution is no other run).
  if [ "$lock_held" = yes ] && [ "${lock_holder%% *}" != "$token" ]; then
    lock_waited=$(( $(date +%s) - lock_since ))
    if [ -n "$lock_holder" ] || [ "$lock_waited" -gt 0 ]; then
      echo "WAITED $lock_waited ${lock_holder:-another run}"
    fi
  fi
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
lock_ours() { # the owner line's first word, read without starting a process
  lock_first=''
  # shellcheck disable=SC2034 # the rest of the line is read only to leave the first word alone
  { IFS=' ' read -r lock_first lock_owner_rest <"$lock/owner"; } 2>/dev/null
  [ "$lock_first" = "$token" ]
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
release_lock() {
  if lock_ours; then rm -rf -- "$lock"; fi
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
keep_lock() { # CODE: the exit code when the lock is not ours any more
  lock_ours || { echo "LOST_LOCK"; exit "$1"; }
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
release_on_failure() { rc=$?; [ "$rc" = 0 ] || release_lock; exit "$rc"; }
