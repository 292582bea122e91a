# A detached tmux session on the login node, started even while other runs start and end theirs.
# A tmux server exits when its last session ends; a client that meets it while it exits fails
# with "server exited unexpectedly" (or "lost server") and starts nothing. With eight pipelines at
# once one of them met it. Such a failure is tried again (ten times, a fifth of a second apart);
# any other failure (no tmux, a duplicate name) is returned at once with tmux's own message.
#
# Expects: nothing.
# Defines: tmux_start SESSION COMMAND (status 0 once the session started; else tmux's message
#          on stderr and status 1).
# Prints:  nothing on stdout.
tmux_start() {
  tmux_try=1
  until tmux_out=$(tmux new-session -d -s "$1" "$2" 2>&1); do
    case $tmux_out in
      *"server exited unexpectedly"* | *"lost server"*) ;;
      *) printf '%s\n' "$tmux_out" >&2; return 1 ;;
    esac
    if [ "$tmux_try" -ge 10 ]; then printf '%s\n' "$tmux_out" >&2; return 1; fi
    tmux_try=$((tmux_try + 1))
    sleep 0.2 2>/dev/null || sleep 1
  done
}
