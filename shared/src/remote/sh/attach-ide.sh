# slurm-attach --ide, after check_running and pick_node (job-running.sh): an sshd of the person's
# own for the job's node (no root): a host key and configuration under ~/.slurm-tools/ide on the
# shared home, this machine's public key authorized there.
#
# Expects: node, ov (overlap.sh), pub (this machine's public key line).
# Prints:  NO_SSHD | NO_KEYGEN (then exits 0), else NODE <node>, SSHD <path>, DIR <dir>,
#          OVERLAP <srun's overlap flag>, USER <user>, HOSTKEY <type> <key>.
: "${node?}" "${ov?}" "${pub?}"
sshd=$(command -v sshd 2>/dev/null || true)
[ -n "$sshd" ] || for p in /usr/sbin/sshd /usr/local/sbin/sshd /sbin/sshd; do [ -x "$p" ] && sshd=$p && break; done
[ -n "$sshd" ] || { echo "NO_SSHD"; exit 0; }
d=$HOME/.slurm-tools/ide
umask 077
mkdir -p "$d" || exit 1
[ -f "$d/host_key" ] || ssh-keygen -q -t ed25519 -N '' -C slurm-tools-ide-host -f "$d/host_key" || { echo "NO_KEYGEN"; exit 0; }
cat >"$d/sshd_config" <<EOF
HostKey $d/host_key
AuthorizedKeysFile $d/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
PidFile none
Subsystem sftp internal-sftp
EOF
touch "$d/authorized_keys"
grep -Fqx -- "$pub" "$d/authorized_keys" || printf '%s\n' "$pub" >>"$d/authorized_keys"
echo "NODE $node"
echo "SSHD $sshd"
echo "DIR $d"
echo "OVERLAP $ov"
echo "USER $(id -un)"
echo "HOSTKEY $(cut -d' ' -f1,2 "$d/host_key.pub")"
