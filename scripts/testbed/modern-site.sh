# shellcheck shell=bash
# scripts/testbed/modern-site.sh: the second, modern site of the test bed, sourced by
# scripts/local-cluster (which defines STATE, SYS, CACHE, CLUSTER_USER, log, die, wait_for,
# write_if_changed, pid_alive, mark_started).
#
# What it is: a Debian 13 root (Slurm 24.11, munge, OpenSSH 10, Apptainer 1.4.5, git, tmux, gcc),
# built once per machine with debootstrap and cached under $CACHE/modern (outside the checkout);
# three hosts on their own bridge stbr1 (10.99.0.1 is this machine): the login node
# `modern-login` (10.99.0.10: slurmctld, munged, sshd asking the account's password and then a
# TOTP code, PerSourcePenalties on as OpenSSH 10 ships it) and two compute nodes gn1, gn2
# (10.99.0.11-12: slurmd, munged; 4 fake GPUs of type a100 each). ClusterName `modern`, its own
# munge key, users and state; partition `batch`; no accounting (slurmdbd 24.11 does not start
# with this Debian's MariaDB, ../shared/TESTBED.md), a real configuration: sacct answers "Slurm
# accounting storage is disabled".
#
# How it runs (../shared/TESTBED.md "A second, modern site"; not chroot, whose processes cannot
# make the user namespaces Apptainer needs): per host one holder process in its own network
# namespace (stm-HOST) and its own mount and UTS namespace, which mounts proc, sys, a small dev,
# tmpfs run and tmp, and pivot_roots into the root; every daemon joins it with nsenter. The
# holders' mounts vanish with them: `down` leaves no mount, namespace, bridge or process.
#
# The git origins are served at a network address both sites and this machine reach the same
# way: git daemon on 10.99.0.1:9418 (base $SYS: git://10.99.0.1/origin/sample.git, and
# git://10.99.0.1/test-origins/NAME.git), with push enabled (the local side pushes its commits
# there). TEST BED ONLY: anonymous push on a bridge that routes nowhere else.

MODERN_CACHE=$CACHE/modern
MODERN_ROOT=$MODERN_CACHE/root
# Bump when the recipe in modern_build_root changes: a cached root of another build is rebuilt.
MODERN_ROOT_BUILD=1
MODERN_APPTAINER_DEB=pool/main/a/apptainer/apptainer_1.4.5-2_amd64.deb
MODERN_PACKAGES="slurmctld slurmd slurm-client munge openssh-server tmux git ca-certificates
    squashfs-tools uidmap busybox-static squashfuse fuse3 libpam-google-authenticator gcc libc6-dev
    procps iproute2 python3 curl"
MODERN_BRIDGE=stbr1
MODERN_NET=10.99.0
MODERN_GW=$MODERN_NET.1
MODERN_HOSTS=(modern-login gn1 gn2)
MODERN_NODES=(gn1 gn2)
MODERN_LOGIN=modern-login
MODERN_HOST=slurm-modern
MODERN_PARTITION=batch
MODERN_GPU_TYPE=a100
MODERN_GPU_NAME=A100
MODERN_RUN=$SYS/modern
GIT_DAEMON_PORT=9418
# The sample project's origin as every side reaches it.
ORIGIN_URL=git://$MODERN_GW/origin/sample.git

modern_ip() {
    case $1 in
        modern-login) echo "$MODERN_NET.10" ;;
        gn*) echo "$MODERN_NET.1${1#gn}" ;;
    esac
}
modern_ns() { echo "stm-${1#modern-}"; }

# The root: debootstrap (minbase, trixie) from the mirror this machine's apt uses, the packages
# installed by apt inside it (a private mount namespace: proc, sys, dev, run mounted for apt and
# gone with it), Apptainer from the unstable suite's pool (it needs glibc 2.38, as trixie has).
modern_build_root() {
    if [[ -x $MODERN_ROOT/usr/sbin/slurmctld && $(cat "$MODERN_CACHE/root.version" 2>/dev/null) == "$MODERN_ROOT_BUILD" ]]; then
        return 0
    fi
    local mirror
    mirror=$(awk '/^URIs:/ { print $2; exit } /^deb / { print $2; exit }' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true)
    [[ -n $mirror ]] || die "no Debian mirror in /etc/apt/sources.list(.d): the modern site's root is built from it"
    local new=$MODERN_CACHE/root.new
    install -d -m 755 "$MODERN_CACHE" "$SYS/log"
    rm -rf "$new"
    log "building the modern site's Debian 13 root (debootstrap and apt from $mirror, about a minute; cached in $MODERN_CACHE)"
    debootstrap --variant=minbase trixie "$new" "$mirror" >"$SYS/log/modern-debootstrap.log" 2>&1 \
        || { tail -20 "$SYS/log/modern-debootstrap.log" >&2; die "debootstrap of the modern root failed (log: $SYS/log/modern-debootstrap.log)"; }
    printf '#!/bin/sh\nexit 101\n' >"$new/usr/sbin/policy-rc.d"; chmod 755 "$new/usr/sbin/policy-rc.d"
    curl -sfL -o "$new/tmp/apptainer.deb" "$mirror/$MODERN_APPTAINER_DEB" \
        || die "could not download $MODERN_APPTAINER_DEB from $mirror (Apptainer for the modern site)"
    # shellcheck disable=SC2016
    unshare -m --propagation private sh -c '
        R=$1; shift
        mount -t proc proc "$R/proc" && mount --rbind /sys "$R/sys" && mount --rbind /dev "$R/dev" &&
        mount -t tmpfs tmpfs "$R/run" &&
        chroot "$R" sh -c "export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq && apt-get install -y -qq --no-install-recommends $* &&
            apt-get install -y -qq --no-install-recommends /tmp/apptainer.deb"' \
        sh "$new" $MODERN_PACKAGES >"$SYS/log/modern-apt.log" 2>&1 \
        || { tail -20 "$SYS/log/modern-apt.log" >&2; die "installing the modern root's packages failed (log: $SYS/log/modern-apt.log)"; }
    rm -f "$new/tmp/apptainer.deb"
    rm -rf "$new"/var/cache/apt/archives/*.deb "$new"/usr/share/doc "$new"/usr/share/man
    rm -rf "$MODERN_ROOT"
    mv "$new" "$MODERN_ROOT"
    echo "$MODERN_ROOT_BUILD" >"$MODERN_CACHE/root.version"
}

# The site's own configuration, written into the root (idempotent; returns 0 when Slurm's
# changed).
modern_configure() {
    local R=$MODERN_ROOT changed=1 h
    {
        echo "127.0.0.1 localhost"
        echo "::1 localhost ip6-localhost ip6-loopback"
        echo "$MODERN_GW gateway"
        for h in "${MODERN_HOSTS[@]}"; do echo "$(modern_ip "$h") $h"; done
    } | write_if_changed "$R/etc/hosts" 644 || true
    # No resolver here: the copied one made each slurmd stall 10 s at start.
    echo "nameserver 127.0.0.1" | write_if_changed "$R/etc/resolv.conf" 644 || true
    # Its own munge key.
    [[ -s $R/etc/munge/munge.key ]] || { head -c 1024 /dev/urandom >"$R/etc/munge/munge.key"; }
    chroot "$R" sh -c 'chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key'
    # The user, with a password and a TOTP secret of this site's own.
    chroot "$R" id "$CLUSTER_USER" >/dev/null 2>&1 || chroot "$R" useradd -m -s /bin/bash "$CLUSTER_USER"
    [[ -s $STATE/modern_password ]] || (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$STATE/modern_password")
    [[ -s $STATE/modern_totp_secret ]] || (umask 077; head -c 10 /dev/urandom | base32 | tr -d '=\n' >"$STATE/modern_totp_secret")
    printf '%s:%s\n' "$CLUSTER_USER" "$(cat "$STATE/modern_password")" | chroot "$R" chpasswd
    local home=$R/home/$CLUSTER_USER
    { cat "$STATE/modern_totp_secret"; printf '\n" TOTP_AUTH\n" WINDOW_SIZE 3\n'; } >"$home/.google_authenticator.new"
    if cmp -s "$home/.google_authenticator.new" "$home/.google_authenticator"; then rm -f "$home/.google_authenticator.new"
    else mv "$home/.google_authenticator.new" "$home/.google_authenticator"; fi
    chroot "$R" sh -c "chown $CLUSTER_USER: /home/$CLUSTER_USER/.google_authenticator && chmod 400 /home/$CLUSTER_USER/.google_authenticator
        install -d -o $CLUSTER_USER -g $CLUSTER_USER -m 755 /home/$CLUSTER_USER/work"
    write_if_changed "$home/.gitconfig" 644 <<EOF || true
[user]
	name = Cluster User
	email = $CLUSTER_USER@modern-login
[init]
	defaultBranch = main
EOF
    chroot "$R" chown "$CLUSTER_USER:" "/home/$CLUSTER_USER/.gitconfig"
    # sshd: password and then a one-time code, through PAM; PerSourcePenalties as shipped.
    [[ -f $R/etc/ssh/ssh_host_ed25519_key ]] || ssh-keygen -q -t ed25519 -N '' -f "$R/etc/ssh/ssh_host_ed25519_key"
    write_if_changed "$R/etc/ssh/sshd_config" 644 <<EOF || true
# Written by slurm-tools scripts/local-cluster: the modern site's login node.
ListenAddress $(modern_ip "$MODERN_LOGIN")
Port 22
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile /run/sshd.pid
PubkeyAuthentication no
PasswordAuthentication no
KbdInteractiveAuthentication yes
AuthenticationMethods keyboard-interactive
UsePAM yes
AllowUsers $CLUSTER_USER
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
EOF
    write_if_changed "$R/etc/pam.d/sshd" 644 <<'EOF' || true
# Written by slurm-tools scripts/local-cluster: the account's password, then a one-time code.
auth requisite pam_unix.so
auth required pam_google_authenticator.so
account required pam_unix.so
session required pam_permit.so
EOF
    install -d -m 755 "$R/var/spool/slurmctld" "$R/var/spool/slurmd" "$R/var/log/slurm" "$R/etc/slurm"
    local nodes="" n
    for n in "${MODERN_NODES[@]}"; do
        nodes+="NodeName=$n NodeAddr=$(modern_ip "$n") CPUs=8 RealMemory=8000 Gres=gpu:$MODERN_GPU_TYPE:4 State=UNKNOWN"$'\n'
    done
    write_if_changed "$R/etc/slurm/slurm.conf" 644 <<EOF && changed=0
# Written by slurm-tools scripts/local-cluster (the modern test site). Changes are overwritten by "up".
ClusterName=modern
SlurmctldHost=$MODERN_LOGIN($(modern_ip "$MODERN_LOGIN"))
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobAcctGatherType=jobacct_gather/linux
# No accounting (AccountingStorageType unset; accounting_storage/none is gone in 24.11).
JobCompType=jobcomp/none
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
SlurmUser=root
SlurmdUser=root
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd/%n
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
MinJobAge=300
KillWait=5
SlurmdTimeout=20
InactiveLimit=0
${nodes}PartitionName=$MODERN_PARTITION Nodes=gn[1-${#MODERN_NODES[@]}] Default=YES MaxTime=04:00:00 State=UP
EOF
    write_if_changed "$R/etc/slurm/gres.conf" 644 <<EOF && changed=0
NodeName=gn[1-${#MODERN_NODES[@]}] Name=gpu Type=$MODERN_GPU_TYPE File=/dev/fakegpu[0-3]
EOF
    # TEST STAND-IN for torchrun, as on the first site.
    install -m 755 "$REPO/scripts/testbed/torchrun-standin" "$R/usr/local/bin/torchrun"
    return $changed
}

modern_network() {
    if ! ip link show "$MODERN_BRIDGE" >/dev/null 2>&1; then
        log "creating the modern site's bridge $MODERN_BRIDGE ($MODERN_GW/24)"
        ip link add "$MODERN_BRIDGE" type bridge
        ip addr add "$MODERN_GW/24" dev "$MODERN_BRIDGE"
    fi
    ip link set "$MODERN_BRIDGE" up
    local h ns veth
    for h in "${MODERN_HOSTS[@]}"; do
        ns=$(modern_ns "$h") veth=$(modern_ns "$h")-h
        [[ -e /run/netns/$ns ]] || ip netns add "$ns"
        if ! ip link show "$veth" >/dev/null 2>&1; then
            ip link add "$veth" type veth peer name eth0 netns "$ns"
            ip link set "$veth" master "$MODERN_BRIDGE" up
            ip -n "$ns" addr add "$(modern_ip "$h")/24" dev eth0
        fi
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
        # This machine (the registry and the git origins on the other bridge) through the gateway.
        ip -n "$ns" route replace default via "$MODERN_GW"
    done
    if command -v iptables >/dev/null 2>&1 && ! iptables -C FORWARD -i "$MODERN_BRIDGE" -o "$MODERN_BRIDGE" -j ACCEPT 2>/dev/null; then
        iptables -I FORWARD -i "$MODERN_BRIDGE" -o "$MODERN_BRIDGE" -j ACCEPT 2>/dev/null || true
    fi
}

modern_holder_pid() { cat "$MODERN_RUN/holder-$1.pid" 2>/dev/null || true; }
modern_in() { # modern_in HOST COMMAND...: run in that host (its namespaces and root)
    local pid; pid=$(modern_holder_pid "$1")
    shift
    nsenter -t "$pid" -m -u -n -r -w -- "$@"
}

# One host's holder: its network namespace, a private mount and UTS namespace, a fresh proc, the
# host's sys, a small private dev (null zero full random urandom tty, fuse, devpts newinstance,
# shm, and the fake GPUs), tmpfs on run and tmp, pivot_root into the root; then it sleeps.
modern_start_holder() {
    local h=$1 pid
    pid=$(modern_holder_pid "$h")
    # Ready once it has pivoted: the marker is in its own /run (before that, /proc/PID/root is
    # this machine's root).
    if pid_alive "$pid" && [[ -e /proc/$pid/root/run/holder-ready ]]; then return 0; fi
    install -d -m 755 "$MODERN_RUN"
    # shellcheck disable=SC2016
    setsid nsenter --net="/run/netns/$(modern_ns "$h")" unshare --mount --uts --propagation private sh -c '
        set -e
        hostname "$1"; cd "$2"
        mount --bind "$2" "$2"; cd "$2"
        mount -t proc proc proc
        mount --rbind /sys sys
        mount -t tmpfs -o mode=755,size=8m tmpfs dev
        mknod -m 666 dev/null c 1 3; mknod -m 666 dev/zero c 1 5; mknod -m 666 dev/full c 1 7
        mknod -m 666 dev/random c 1 8; mknod -m 666 dev/urandom c 1 9; mknod -m 666 dev/tty c 5 0
        mknod -m 666 dev/fuse c 10 229
        for i in 0 1 2 3; do mknod -m 666 dev/fakegpu$i c 1 3; done
        mkdir dev/pts dev/shm
        mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts dev/pts
        ln -s pts/ptmx dev/ptmx; ln -s /proc/self/fd dev/fd
        ln -s /proc/self/fd/0 dev/stdin; ln -s /proc/self/fd/1 dev/stdout; ln -s /proc/self/fd/2 dev/stderr
        mount -t tmpfs -o mode=1777 tmpfs dev/shm
        mount -t tmpfs -o mode=755 tmpfs run
        mount -t tmpfs -o mode=1777 tmpfs tmp
        mkdir -p .oldroot
        pivot_root . .oldroot
        cd /
        umount -l /.oldroot
        : >/run/holder-ready
        exec sleep infinity' sh "$h" "$MODERN_ROOT" </dev/null >/dev/null 2>>"$SYS/log/modern-holder-$h.log" &
    echo $! >"$MODERN_RUN/holder-$h.pid"
    mark_started "modern-holder-$h" "$!"
    wait_for 10 "the modern site's host $h" test -e "/proc/$!/root/run/holder-ready"
}

# A daemon in a host, unless its pid file (inside the host's /run) names a live process.
modern_daemon() { # modern_daemon HOST NAME PIDFILE COMMAND...
    local h=$1 name=$2 pidf=$3 pid
    shift 3
    # No pid namespace: a pid in the host's /run is this machine's pid.
    pid=$(cat "/proc/$(modern_holder_pid "$h")/root$pidf" 2>/dev/null || true)
    if pid_alive "$pid"; then return 0; fi
    log "starting $name on the modern site's $h"
    modern_in "$h" "$@"
    wait_for 20 "$name on $h" sh -c '[ -s "$1" ]' sh "/proc/$(modern_holder_pid "$h")/root$pidf"
}

modern_munged() {
    modern_in "$1" install -d -o munge -g munge -m 755 /run/munge
    modern_daemon "$1" munged /run/munge/munged.pid runuser -u munge -- /usr/sbin/munged
}

modern_restart_slurm() { # after a configuration change: the daemons read it again
    local h pid
    for h in "${MODERN_HOSTS[@]}"; do
        pid=$(modern_holder_pid "$h"); pid_alive "$pid" || continue
        for f in slurmctld slurmd; do
            if [[ -s /proc/$pid/root/run/$f.pid ]]; then
                log "restarting $f on the modern site's $h (configuration changed)"
                modern_in "$h" sh -c "kill \$(cat /run/$f.pid); i=0; while kill -0 \$(cat /run/$f.pid) 2>/dev/null && [ \$i -lt 50 ]; do sleep 0.2; i=\$((i+1)); done; rm -f /run/$f.pid"
            fi
        done
    done
}

modern_nodes_idle() {
    local states
    states=$(modern_in "$MODERN_LOGIN" sinfo -h -N -o '%t' 2>/dev/null) || return 1
    [[ $(grep -Ec '^(idle|mix|alloc|comp|plnd)' <<<"$states") -eq ${#MODERN_NODES[@]} ]]
}

# The git origins at a network address: git daemon on this machine's address on the modern
# bridge, reached the same way from this machine, the first site's login side and the modern site.
git_daemon_up() { (exec 3<>"/dev/tcp/$MODERN_GW/$GIT_DAEMON_PORT") 2>/dev/null; }
start_git_daemon() {
    pidfile_alive "$SYS/git-daemon.pid" && return 0
    git_daemon_up && die "port $GIT_DAEMON_PORT on $MODERN_GW already answers; stop what listens there (ss -ltnp | grep $GIT_DAEMON_PORT)"
    log "starting git daemon (git://$MODERN_GW/origin/..., git://$MODERN_GW/test-origins/...)"
    setsid git daemon --reuseaddr --listen="$MODERN_GW" --port="$GIT_DAEMON_PORT" --base-path="$SYS" \
        --export-all --enable=receive-pack --pid-file="$SYS/git-daemon.pid" \
        "$SYS/origin" "$SYS/test-origins" </dev/null >>"$SYS/log/git-daemon.log" 2>&1 &
    wait_for 10 "git daemon" git_daemon_up
    mark_started git-daemon "$(cat "$SYS/git-daemon.pid")"
}

modern_up() {
    modern_build_root
    local slurm_changed=no
    modern_configure && slurm_changed=yes
    modern_network
    local h
    for h in "${MODERN_HOSTS[@]}"; do modern_start_holder "$h"; done
    for h in "${MODERN_HOSTS[@]}"; do modern_munged "$h"; done
    [[ $slurm_changed == yes ]] && modern_restart_slurm
    modern_daemon "$MODERN_LOGIN" slurmctld /run/slurmctld.pid slurmctld
    for h in "${MODERN_NODES[@]}"; do modern_daemon "$h" slurmd /run/slurmd.pid slurmd -N "$h"; done
    modern_in "$MODERN_LOGIN" install -d -m 755 /run/sshd
    modern_daemon "$MODERN_LOGIN" sshd /run/sshd.pid /usr/sbin/sshd -E /var/log/sshd.log
    if ! modern_nodes_idle; then
        sleep 1
        modern_in "$MODERN_LOGIN" scontrol update nodename="gn[1-${#MODERN_NODES[@]}]" state=resume >/dev/null 2>&1 || true
    fi
    wait_for 60 "the modern site's nodes (idle in sinfo)" modern_nodes_idle
    start_git_daemon
}

# Everything of the site goes: every process in a holder's mount namespace, the holders, the
# network namespaces, the veths (with them) and the bridge.
modern_down() {
    local h pid mnt p
    for h in "${MODERN_HOSTS[@]}"; do
        pid=$(modern_holder_pid "$h")
        if pid_alive "$pid"; then
            log "stopping the modern site's $h"
            mnt=$(readlink "/proc/$pid/ns/mnt")
            for p in /proc/[0-9]*; do
                [[ ${p#/proc/} == "$pid" ]] && continue
                [[ $(readlink "$p/ns/mnt" 2>/dev/null) == "$mnt" ]] && kill "${p#/proc/}" 2>/dev/null
            done
            sleep 0.5
            for p in /proc/[0-9]*; do
                [[ ${p#/proc/} == "$pid" ]] && continue
                [[ $(readlink "$p/ns/mnt" 2>/dev/null) == "$mnt" ]] && kill -9 "${p#/proc/}" 2>/dev/null
            done
            kill "$pid" 2>/dev/null
            local i; for ((i = 0; i < 50; i++)); do pid_alive "$pid" || break; sleep 0.1; done
        fi
        rm -f "$MODERN_RUN/holder-$h.pid" "$STATE/started/modern-holder-$h"
        [[ -e /run/netns/$(modern_ns "$h") ]] && ip netns delete "$(modern_ns "$h")"
    done
    if ip link show "$MODERN_BRIDGE" >/dev/null 2>&1; then ip link delete "$MODERN_BRIDGE"; fi
    return 0
}

modern_status() {
    local bad=0 h pid f
    for h in "${MODERN_HOSTS[@]}"; do
        pid=$(modern_holder_pid "$h")
        if ! pid_alive "$pid"; then printf '%-12s NOT running\n' "modern:$h"; bad=1; continue; fi
        for f in munged slurmctld slurmd sshd; do
            local pf=/proc/$pid/root/run/$f.pid
            [[ $f == munged ]] && pf=/proc/$pid/root/run/munge/munged.pid
            [[ $f == slurmctld || $f == sshd ]] && [[ $h != "$MODERN_LOGIN" ]] && continue
            [[ $f == slurmd && $h == "$MODERN_LOGIN" ]] && continue
            if ! pid_alive "$(cat "$pf" 2>/dev/null)"; then
                printf '%-12s NOT running\n' "modern:$h:$f"; bad=1
            fi
        done
        ((bad == 0)) && printf '%-12s running (holder pid %s)\n' "modern:$h" "$pid"
    done
    component_status git-daemon "$SYS/git-daemon.pid" || bad=1
    return $bad
}

# TEST ONLY: open a ControlMaster to the modern login node, standing in for the person who types
# the password and the code (SSH_ASKPASS answers both prompts: the password file, then oathtool).
modern_login() {
    local cp=$1
    if ssh -F "$STATE/ssh_config" -o ControlPath="$cp" -O check "$MODERN_HOST" >/dev/null 2>&1; then
        log "a master is already running at $cp"; return 0
    fi
    local expanded; expanded=$(ssh -F "$STATE/ssh_config" -o ControlPath="$cp" -G "$MODERN_HOST" </dev/null | awk '$1=="controlpath"{print $2}')
    [[ -S $expanded ]] && rm -f "$expanded"
    SSH_ASKPASS="$STATE/modern_askpass" SSH_ASKPASS_REQUIRE=force DISPLAY=none \
        setsid ssh -F "$STATE/ssh_config" -N -o ControlMaster=yes -o ControlPath="$cp" \
        -o ControlPersist=no "$MODERN_HOST" </dev/null >/dev/null 2>>"$STATE/modern-login.log" &
    local i
    for ((i = 0; i < 75; i++)); do
        if ssh -F "$STATE/ssh_config" -o ControlPath="$cp" -O check "$MODERN_HOST" >/dev/null 2>&1; then
            log "modern site master running at $expanded"; return 0
        fi
        sleep 0.2
    done
    die "the modern site's master did not come up (see $STATE/modern-login.log and $MODERN_ROOT/var/log/sshd.log)"
}
