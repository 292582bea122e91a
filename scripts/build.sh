#!/bin/bash
# Runs the project's build inside the build job (see build.slurm):
#
#   build.sh <repo_dir> [build args...]            TensorRT-LLM: python3 ./scripts/build_wheel.py ARGS
#   build.sh <repo_dir> --command-file FILE        the document's `build_command`, run by bash
set -u
cd "$1" || { echo "build.sh: cannot enter $1" >&2; exit 2; }
shift
if [ "${1:-}" = --command-file ]; then
    exec bash "$2"
fi
exec python3 ./scripts/build_wheel.py "$@"
