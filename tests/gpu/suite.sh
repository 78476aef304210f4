#!/bin/sh
# The whole GPU suite at once, for a machine with a GPU and many cores (a
# lent H100: 292 s with 3 shards, 201 s with 8, where one after the other
# took 560 s): tests/gpu/device.sh
# in N shards in parallel (GPU_SHARD), beside horovod.sh, native-cuda.sh,
# hooks.sh and no-gpu.sh, each of them in parallel too.  Logs go to DIR; one line per test file with its
# status, then every PASS/FAIL/SKIP line.  Exit status 0 when all passed.
#
#   tests/gpu/suite.sh [DIR] [N]      (DIR default: a new temporary folder; N: 3)
#
# Needs what the tests need: mpirun, a PyTorch with CUDA as $PYTHON (default
# python3), nvcc for native-cuda.sh.  A machine without MPI or build tools
# (a lent GPU machine) takes a bundle made here: tests/gpu/bundle.sh (Debian
# 12's Open MPI and this build tree; `bundle.sh run` there).
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(mktemp -d)}
n=${2:-3}
mkdir -p "$out"
: "${PYTHON:=python3}"
export PYTHON
start=$(date +%s)
i=0
while [ $i -lt "$n" ]; do
  (GPU_SHARD=$i/$n sh "$here/device.sh" >"$out/device$i.log" 2>&1; echo "device.sh shard $i/$n: rc=$?" >"$out/device$i.rc") &
  i=$((i + 1))
done
for t in horovod native-cuda hooks no-gpu; do
  (sh "$here/$t.sh" >"$out/$t.log" 2>&1; echo "$t.sh: rc=$?" >"$out/$t.rc") &
done
wait
cat "$out"/*.rc
echo "GPU suite: $(($(date +%s) - start)) s; logs in $out"
grep -h -E "^(PASS|FAIL|SKIP)" "$out"/*.log
! grep -q -v -E "rc=(0|77)$" "$out"/*.rc
