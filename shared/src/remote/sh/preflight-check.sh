# slurm-ssh-preflight's look at the login node, in the same round trip as the login: the remote
# working directory (made when missing; a literal ~ is the home), who and where we are, and what
# the login node has: tmux, Slurm, git, tar, accounting, MPI plugins, the container flags of
# srun, pyxis and its version, enroot, Apptainer.
#
# Expects: cwd (the remote working directory; "~" or "~/..." for the home).
# Prints:  key=value lines: cwd, cwd_exists, cwd_writable, cwd_created, user, home, login_host,
#          tmux, slurm, git, tar, accounting (enabled|disabled|unreachable|missing), mpi,
#          container_flags, container_writable, pyxis, enroot, apptainer.
: "${cwd?}"
# A literal ~ (quoted, as every value is) is the home, expanded here where it is known.
# shellcheck disable=SC2088
case "$cwd" in "~") cwd=$HOME ;; "~/"*) cwd=$HOME/${cwd#"~/"} ;; esac
created=0
if [ ! -d "$cwd" ]; then mkdir -p -- "$cwd" 2>/dev/null && created=1; fi
echo "cwd=$cwd"
if [ -d "$cwd" ]; then echo cwd_exists=1; else echo cwd_exists=0; fi
if [ -w "$cwd" ]; then echo cwd_writable=1; else echo cwd_writable=0; fi
echo "cwd_created=$created"
echo "user=$(id -un 2>/dev/null)"
echo "home=$HOME"
echo "login_host=$(hostname 2>/dev/null | head -n 1)"
# shellcheck disable=SC2317 # a script that includes this file may not call it
have() { command -v "$1" >/dev/null 2>&1; }
# shellcheck disable=SC2317 # a script that includes this file may not call it
first() { "$@" 2>/dev/null | head -n 1; }
if have tmux; then echo "tmux=$(first tmux -V)"; else echo tmux=; fi
if have squeue; then echo "slurm=$(first squeue --version)"; else echo slurm=; fi
if have git; then echo "git=$(first git --version)"; else echo git=; fi
if have tar; then echo "tar=$(first tar --version)"; else echo tar=; fi
if have sacct; then
  if have timeout; then a=$(timeout 20 sacct -n -X -P -S now --format=JobID 2>&1); else a=$(sacct -n -X -P -S now --format=JobID 2>&1); fi
  case "$a" in
    *"accounting storage is disabled"*) echo accounting=disabled ;;
    *rror*|*"timed out"*) echo accounting=unreachable ;;
    *) echo accounting=enabled ;;
  esac
else echo accounting=missing; fi
help=; if have srun; then help=$(srun --help 2>&1)
  # The MPI plugin types (the lines under "MPI plugin types are...", before the versions).
  echo "mpi=$(srun --mpi=list 2>&1 | awk '/plugin types/ { on = 1; next } /specific|versions/ { on = 0 } on && NF == 1 { printf "%s%s", sep, $1; sep = "," }')"
fi
case "$help" in *--container-image*) echo container_flags=1 ;; *) echo container_flags=0 ;; esac
case "$help" in *--container-writable*) echo container_writable=1 ;; *) echo container_writable=0 ;; esac
# pyxis's version, from the plugin srun loads (its plugstack.conf and the files it includes).
# (PlugStackConfig "(null)" is the default: plugstack.conf beside slurm.conf.)
cfg=$(scontrol show config 2>/dev/null)
conf=$(printf '%s\n' "$cfg" | awk -F'= ' '/^PlugStackConfig/ { print $2; exit }')
case "$conf" in ""|"(null)")
  sc=$(printf '%s\n' "$cfg" | awk -F'= ' '/^SLURM_CONF/ { print $2; exit }')
  conf=$(dirname -- "${sc:-${SLURM_CONF:-/etc/slurm/slurm.conf}}")/plugstack.conf ;;
esac
so=
if [ -r "$conf" ]; then
  for f in "$conf" $(awk '$1 == "include" { print $2 }' "$conf" 2>/dev/null); do
    [ -r "$f" ] || continue
    so=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /spank_pyxis\.so$/) { print $i; exit } }' "$f")
    [ -n "$so" ] && break
  done
fi
v=; if [ -n "$so" ] && [ -r "$so" ]; then v=$(grep -ao 'pyxis: version v[0-9][0-9.]*' "$so" 2>/dev/null | head -n 1); fi
if [ -n "$v" ]; then echo "pyxis=${v#pyxis: version v}"; elif [ -n "$so" ]; then echo pyxis=present; else echo pyxis=; fi
if have enroot; then echo "enroot=$(first enroot version)"; else echo enroot=; fi
# Apptainer (or Singularity, its older name) on the PATH jobs inherit from this shell.
if have apptainer; then echo "apptainer=$(first apptainer --version)"
elif have singularity; then echo "apptainer=$(first singularity --version)"
else echo apptainer=; fi
