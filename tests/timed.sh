#!/bin/sh
# SH_LOG_COMPILER: run one test script with the shell, then write how long it
# took as the last line of its log ("test-seconds: N"), which check-all.sh and
# check-stacks.sh read to name the slowest tests (CI has a time budget).  A
# script that runs past HVDCHECK_TEST_LIMIT seconds (default 1200; the
# slowest take about 200 s on Debian 12, 400 on sid) is ended and fails with
# a line saying so: a test that hangs fails, and the suites go on.
# Usage: timed.sh SHELL SCRIPT [ARGS...]
sh=$1
shift
start=$(date +%s)
limit=${HVDCHECK_TEST_LIMIT:-1200}
timeout -k 30 "$limit" "$sh" "$@"
rc=$?
[ $rc = 124 ] || [ $rc = 137 ] && [ $(($(date +%s) - start)) -ge "$limit" ] &&
  echo "FAIL: $* ran past ${limit} s (HVDCHECK_TEST_LIMIT) and was ended"
echo "test-seconds: $(($(date +%s) - start))"
exit $rc
