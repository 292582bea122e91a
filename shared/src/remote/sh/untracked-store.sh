# Each snapshot's own untracked files, kept for the jobs submitted with it. The clone holds the
# untracked files of its latest untracked sync only: when two checkouts sync into one clone, the
# second replaces the first's files before the first submits. So after each untracked sync its
# files are also kept, per snapshot, under the clone's .git, as hard links (every tar the syncs
# use replaces a file by a new one and never writes into it, so a link keeps the content it had;
# a copy where cp cannot link), and a job's tree takes its own snapshot's set from there.
#
# A set is never changed once made, and is removed only an hour after it stopped being its
# snapshot's current one: a sync of the same snapshot makes a new set and then names it in the
# snapshot's pointer file (replaced by a rename), so a job's tree being made from the set it read
# a moment before still finds every file (concurrent pipelines syncing one snapshot met exactly
# that when a set was replaced in place).
#
# This file: where the sets are and how files are copied, for the sync (untracked-keep.sh keeps
# a set) and for the job's tree (job-tree.sh takes one).
#
# Expects: nothing (the working directory is the clone).
# Defines: untracked_store (the folder: "$untracked_store/SNAPSHOT" is the pointer file naming
#          the snapshot's current set, SET; the set's files are in "$untracked_store/SET", their
#          NUL-separated list in "$untracked_store/SET.paths0"); current_set SNAPSHOT (sets
#          current_set to the snapshot's current set's name, empty when it has none); gnu_tar;
#          copy_listed0 FROM TO (copies the NUL-separated paths on stdin; fails when either the
#          reading or the writing side does).
# Prints:  nothing on stdout.
untracked_store=.git/slurm-tools/untracked-sets
# shellcheck disable=SC2317 # a script that includes this file may not call it
current_set() {
  current_set=''
  { IFS= read -r current_set <"$untracked_store/$1"; } 2>/dev/null
  # Only a name this file's sets have (SNAPSHOT-SECONDS-PID): nothing else is ever followed.
  case $current_set in "$1"-[0-9]*-[0-9]*) ;; *) current_set='' ;; esac
  case $current_set in */* | *..*) current_set='' ;; esac
}
# shellcheck disable=SC2317 # a script that includes this file may not call it
gnu_tar() { case $(tar --version 2>/dev/null) in *GNU*) return 0 ;; *) return 1 ;; esac; }
# shellcheck disable=SC2317 # a script that includes this file may not call it
copy_listed0() {
  # A pipeline's status is its last command's, so the reading tar's is passed out on fd 3: a
  # file gone under the copy must fail it, not leave a tree without that file.
  if gnu_tar; then cl_gnu=yes; else cl_gnu=no; fi
  cl_said=$(
    {
      {
        if [ "$cl_gnu" = yes ]; then (cd -- "$1" || exit 2; tar --null -T - -cf -)
        else tr '\000' '\n' | (cd -- "$1" || exit 2; tar -T - -cf -); fi
        echo "read=$?" >&3
      } | (cd -- "$2" && tar -xf - >&2)
      echo "write=$?"
    } 3>&1
  )
  cl_read=${cl_said#*read=} cl_write=${cl_said#*write=}
  [ "${cl_write%%[!0-9]*}" = 0 ] || return 1
  case ${cl_read%%[!0-9]*} in
    0) return 0 ;;
    # GNU tar's 1: a file changed while it was read (edited in the clone): copied as it was.
    1) [ "$cl_gnu" = yes ] ;;
    *) return 1 ;;
  esac
}
