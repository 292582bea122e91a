# The parts of a fused conversation after its opening (shared/src/sync/fused.rs): the command's
# stdin read into a file (exactly its bytes, ahead of the untracked files' stream), then each
# part (run by the caller in a subshell with its output in fused_out and fused_err) reported
# behind a header; the command runs only when both syncs succeeded and the checkout is at the
# snapshot.
#
# Expects: fused_repo, fused_snapshot, fused_in_bytes.
# Defines: fused_check_kept ID_FILE KEPT_ID, fused_start (fused_out, fused_err, fused_in: temporary files,
#          removed on exit), fused_part NAME RC, fused_hand_over.
# Prints:  @@slurm-tools-stale                  the manifest this machine kept is not the
#                                               cluster's (then exits 125)
#          @@slurm-tools-part NAME RC OUT ERR   a part's exit code and the sizes of its stdout
#                                               and stderr, which follow
#          @@slurm-tools-moved                  the checkout is not at the snapshot after the
#                                               tracked part (then exits 125)
#          @@slurm-tools-run                    the command runs now, its output streamed
# Each header starts on a line of its own (a newline before it).
: "${fused_repo?}" "${fused_snapshot?}" "${fused_in_bytes?}"
# shellcheck disable=SC2317 # a script that includes this file may not call it
fused_check_kept() { # ID_FILE KEPT_ID: the manifest's id file in the checkout, the id kept here
  if [ "$(cat -- "$fused_repo/$1" 2>/dev/null)" != "$2" ]; then
    printf '\n@@slurm-tools-stale\n'; exit 125
  fi
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
fused_start() { # the temporary files, and the command's stdin into fused_in
  fused_out=$(mktemp "${TMPDIR:-/tmp}/slurm-tools-part.XXXXXX") || exit 125
  fused_err=$(mktemp "${TMPDIR:-/tmp}/slurm-tools-part.XXXXXX") || { rm -f -- "$fused_out"; exit 125; }
  fused_in=$(mktemp "${TMPDIR:-/tmp}/slurm-tools-part.XXXXXX") || { rm -f -- "$fused_out" "$fused_err"; exit 125; }
  trap 'rm -f -- "$fused_out" "$fused_err" "$fused_in"' EXIT
  if [ "$fused_in_bytes" -gt 0 ]; then
    # Exactly that many bytes (see REMOTE_ENTRY in ssh.rs): one block, else a byte at a time.
    dd bs="$fused_in_bytes" count=1 iflag=fullblock 2>/dev/null >"$fused_in" \
      || dd bs=1 count="$fused_in_bytes" 2>/dev/null >"$fused_in" || exit 125
  fi
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
fused_part() { # NAME RC: reported; a failed sync part ends the conversation
  printf '\n@@slurm-tools-part %s %s %s %s\n' "$1" "$2" "$(wc -c < "$fused_out" | tr -d ' ')" "$(wc -c < "$fused_err" | tr -d ' ')"
  cat -- "$fused_out" "$fused_err"
  case $1 in command) exit 0 ;; esac
  if [ "$2" -ne 0 ]; then exit 125; fi
  if [ "$1" = tracked ] && [ "$(cd -- "$fused_repo" && git rev-parse HEAD 2>/dev/null)" != "$fused_snapshot" ]; then
    printf '\n@@slurm-tools-moved\n'; exit 125
  fi
}
# The command may set traps of its own, or exec: nothing of ours is left to clean.
# shellcheck disable=SC2317 # a script that includes this file may not call it
fused_hand_over() {
  rm -f -- "$fused_out" "$fused_err" "$fused_in"
  trap - EXIT
  printf '\n@@slurm-tools-run\n'
}
