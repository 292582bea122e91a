# Each snapshot's own untracked files, kept for the jobs submitted with it. The clone holds the
# untracked files of its latest untracked sync only: when two checkouts sync into one clone, the
# second replaces the first's files before the first submits. So after each untracked sync its
# files are also kept, per snapshot, under the clone's .git, as hard links (every tar the syncs
# use replaces a file by a new one and never writes into it, so a link keeps the content it had;
# a copy where cp cannot link), and a job's tree takes its own snapshot's set from there.
#
# This file: where the sets are and how files are copied, for the sync (untracked-keep.sh keeps
# a set) and for the job's tree (job-tree.sh takes one).
#
# Expects: nothing (the working directory is the clone).
# Defines: untracked_store (COMMIT's set is "$untracked_store/COMMIT", its list of paths
#          "$untracked_store/COMMIT.paths0"); gnu_tar; copy_listed0 FROM TO (copies the
#          NUL-separated paths on stdin).
# Prints:  nothing on stdout.
untracked_store=.git/slurm-tools/untracked-by-snapshot
# shellcheck disable=SC2317 # a script that includes this file may not call it
gnu_tar() { case $(tar --version 2>/dev/null) in *GNU*) return 0 ;; *) return 1 ;; esac; }
# shellcheck disable=SC2317 # a script that includes this file may not call it
copy_listed0() {
  if gnu_tar; then (cd -- "$1" && tar --null -T - -cf -) | (cd -- "$2" && tar -xf -)
  else tr '\000' '\n' | (cd -- "$1" && tar -T - -cf -) | (cd -- "$2" && tar -xf -); fi
}
