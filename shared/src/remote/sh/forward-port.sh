# slurm-forward's look at the job's node, after check_running and pick_node (job-running.sh): the
# port (given, or read from a file the job writes; a literal ~/ is the home) and whether it
# answers on the node.
#
# Expects: node, port (empty: read from port_file), port_file.
# Prints:  NO_PORT_FILE | NO_PORT_IN_FILE (then exits 0), else NODE <node>, PORT <port>,
#          REACH yes|no|unknown.
: "${node?}" "${port?}" "${port_file?}"
if [ -z "$port" ]; then
  # A literal ~/ (quoted, as every value is) is the home.
  # shellcheck disable=SC2088
  case "$port_file" in "~/"*) port_file=$HOME/${port_file#"~/"} ;; esac
  [ -r "$port_file" ] || { echo "NO_PORT_FILE"; exit 0; }
  port=$(grep -o '[0-9][0-9]*' "$port_file" | head -n 1)
  [ -n "$port" ] || { echo "NO_PORT_IN_FILE"; exit 0; }
fi
reach=no
if command -v timeout >/dev/null 2>&1 && command -v bash >/dev/null 2>&1; then
  timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' sh "$node" "$port" 2>/dev/null && reach=yes
else
  reach=unknown
fi
echo "NODE $node"
echo "PORT $port"
echo "REACH $reach"
