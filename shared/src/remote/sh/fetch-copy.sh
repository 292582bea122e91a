# slurm-fetch, step 2: stream exactly the listed files of one directory as a tar archive.
#
# Expects (assigned before this file): dir (the job's code tree or work directory).
# Reads:    the relative paths to copy on stdin, each NUL-terminated (no argument-length limit).
# Prints:   a tar archive on stdout: only the named paths, never the contents of a directory a
#           path has become (--no-recursion). Exit 1 from GNU tar: a file changed while read.
cd "${dir:?}" || exit 1
exec tar --null --no-recursion -T - -cf -
