# slurm-init: what a new cluster's catalog entry and first job need, learned in one round trip.
#
# Expects: nothing.
# Prints (tagged lines, one fact each; a missing tool is simply not reported):
#   USER <name>                 the cluster user
#   HOME <dir>                  its home
#   SCRATCH <dir>               the first of $SCRATCH, $WORK, /scratch/<user>, /lustre/<user>
#                               and /work/<user> that is a writable directory
#   SLURM <version>             `sinfo --version`
#   ASSOC <account>|<partition>|<qos list>|<default qos>   each association of the user (sacctmgr)
#   PART <name>|<max time>|<gres>            each partition (a default one ends its name with *)
#   TOOLS <git> <tmux> <tar>    yes/no for each
me=$(id -un)
echo "USER $me"
echo "HOME $HOME"
for d in "${SCRATCH:-}" "${WORK:-}" "/scratch/$me" "/lustre/$me" "/work/$me"; do
  if [ -n "$d" ] && [ -d "$d" ] && [ -w "$d" ]; then echo "SCRATCH $d"; break; fi
done
v=$(sinfo --version 2>/dev/null) && echo "SLURM $v"
sacctmgr -n -P show assoc user="$me" format=account,partition,qos,defaultqos 2>/dev/null | sed 's/^/ASSOC /'
sinfo -h -o '%P|%l|%G' 2>/dev/null | sort -u | sed 's/^/PART /'
# shellcheck disable=SC2317 # a script that includes this file may not call it
have() { if command -v "$1" >/dev/null 2>&1; then printf yes; else printf no; fi; }
echo "TOOLS $(have git) $(have tmux) $(have tar)"
