# slurm-alloc up, in one round trip: reuse a running or pending allocation of this name, else
# start salloc in a tmux session on the login node at the partition's maximum time, holding the
# allocation with a command of its own, and learn its job id (by the tag in its comment, else by
# salloc's own line in the session).
#
# Expects: name (the allocation's job name), session (its tmux session), tag (the unique tag in
#          its --comment), part (the partition; empty: the default one), salloc_words (salloc's
#          command line, each word quoted), E_TMUX_START, E_SALLOC_EXITED, E_NO_JOB_ID;
#          tmux_start, has_session, kill_session (tmux.sh).
# Prints:  LOGIN <host>                  the login node this ran on
#          REUSE <job>                   an allocation of this name exists (then exits 0)
#          SESSION <session>             its tmux session is there / was started
#          STALE_SESSION_KILLED          a session of this name without an allocation was closed
#          MAXTIME <limit>               the partition's MaxTime
#          CREATED <job>                 the new allocation's job id (then exits 0)
#          SALLOC_EXITED                 salloc ended before a job appeared (then exits)
: "${name?}" "${session?}" "${tag?}" "${part?}" "${salloc_words?}"
me=$(id -un)
echo "LOGIN $(hostname 2>/dev/null)"
existing=$(squeue -h -u "$me" --states=RUNNING,PENDING -o '%i|%j|%k' 2>/dev/null | awk -F'|' -v n="$name" '$2 == n { print $1; exit }')
if [ -n "$existing" ]; then echo "REUSE $existing"; has_session "$session" && echo "SESSION $session"; exit 0; fi
kill_session "$session" && echo "STALE_SESSION_KILLED"
if [ -n "$part" ]; then max=$(scontrol show partition -o "$part" 2>/dev/null | tr ' ' '\n' | sed -n 's/^MaxTime=//p')
else max=$(scontrol show partition -o 2>/dev/null | grep 'Default=YES' | tr ' ' '\n' | sed -n 's/^MaxTime=//p'); fi
echo "MAXTIME ${max:-UNLIMITED}"
case "$max" in ""|UNLIMITED|INVALID) limit="" ;; *) limit="--time=$max" ;; esac
# salloc holds the allocation with a command of its own on the login node, never an interactive
# step (sites with LaunchParameters=use_interactive_step would otherwise start one that takes the
# allocation's resources, and every `exec` step would wait behind it).
# When the allocation ends without `down` (scancel from elsewhere, the time limit), salloc's
# --kill-command=TERM ends this command, so salloc and its tmux session end too (nothing lingers on
# the login node).
hold="sh -c 'trap \"kill \\\$! 2>/dev/null; exit 0\" TERM HUP; while :; do sleep 3600 & wait \$!; done'"
# The command line goes to /bin/sh in a private file, never to tmux's default shell (the person's
# login shell may be tcsh or fish, which read this quoting differently); the file removes itself.
hold_file="$HOME/.slurm-tools/$session.hold.sh"
(umask 077 && mkdir -p -- "$HOME/.slurm-tools" && printf 'rm -f -- "$0"\nexec %s %s %s\n' "$salloc_words" "$limit" "$hold" >"$hold_file") || exit "$E_TMUX_START"
tmux_start "$session" "exec /bin/sh \"\$HOME/.slurm-tools/$session.hold.sh\"" || exit "$E_TMUX_START"
echo "SESSION $session"
i=0
while [ "$i" -lt 300 ]; do
  id=$(squeue -h -u "$me" --states=all -o '%i %k' 2>/dev/null | awk -v t="$tag" '$2 == t { print $1; exit }')
  # A site's job_submit policy may clear the comment: salloc's own line in this up's own
  # session ("Pending/Granted job allocation N") names it too.
  [ -n "$id" ] || id=$(tmux capture-pane -p -t "$session" 2>/dev/null | sed -n 's/.*job allocation \([0-9][0-9]*\).*/\1/p' | head -n 1)
  if [ -n "$id" ]; then echo "CREATED $id"; exit 0; fi
  has_session "$session" || { echo "SALLOC_EXITED"; exit "$E_SALLOC_EXITED"; }
  sleep 1; i=$((i + 10))
done
# No job after half a minute: release what this up started rather than leave it held.
kill_session "$session"
exit "$E_NO_JOB_ID"
