#!/bin/sh
# Builds the sample project, printing CMake-style progress lines.
set -eu
cd "$(dirname "$0")"
mkdir -p build
echo "[ 33%] Building C object build/hello.o"
cc -c hello.c -o build/hello.o
echo "[ 66%] Linking C executable build/hello"
cc build/hello.o -o build/hello
echo "[100%] Built target hello"
