#!/bin/sh
# SH_LOG_COMPILER: run one test script with the shell, then write how long it
# took as the last line of its log ("test-seconds: N"), which check-all.sh and
# check-stacks.sh read to name the slowest tests (CI has a time budget).
# Usage: timed.sh SHELL SCRIPT [ARGS...]
sh=$1
shift
start=$(date +%s)
"$sh" "$@"
rc=$?
echo "test-seconds: $(($(date +%s) - start))"
exit $rc
