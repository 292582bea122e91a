# A detached tmux session on the login node, started even while other runs start and end theirs.
# A tmux server exits when its last session ends; a client that meets it while it exits fails
# with "server exited unexpectedly" (or "lost server") and starts nothing. With eight pipelines at
# once one of them met it. Such a failure is tried again (ten times, a fifth of a second apart);
# any other failure (no tmux, a duplicate name) is returned at once with tmux's own message.
#
# has_session and kill_session match a session by its exact name, in a way tmux 1.8 understands
# too (`-t name` alone also matches a longer name that starts with it: another run's session).
#
# Expects: nothing.
# Defines: tmux_start SESSION COMMAND (status 0 once the session started; else tmux's message
#          on stderr and status 1), has_session SESSION, kill_session SESSION (status 0 when
#          there was one to close).
# Prints:  nothing on stdout.
# shellcheck disable=SC2317 # a script that includes this file may not call it
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
# shellcheck disable=SC2317 # a script that includes this file may not call it
has_session() { tmux ls -F '#{session_name}' 2>/dev/null | grep -Fqx -- "$1"; }
# shellcheck disable=SC2317 # a script that includes this file may not call it
kill_session() { has_session "$1" && tmux kill-session -t "$1" 2>/dev/null; }
