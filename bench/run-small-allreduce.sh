#!/bin/sh
# The latency of a one-float allreduce from a served-horovod script at
# np=2 (bench/small_allreduce.py), this build against another, run after
# run (alternating), and the ratio of their medians:
#   bench/run-small-allreduce.sh LIB_BEFORE [N]     (from the build directory; N pairs, default 4)
set -e
build=${top_builddir:-$(pwd)}
src=$(cd "$(dirname "$0")/.." && pwd)
before=${1:?usage: run-small-allreduce.sh LIB_BEFORE [N]}
after=$build/.libs/libhvdshim.so
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
i=0
while [ $i -lt "${2:-4}" ]; do
  i=$((i + 1))
  for kind in after before; do
    lib=$after
    [ $kind = before ] && lib=$before
    r=$(mpirun -np 2 -x LD_PRELOAD="$lib" -x HVDSHIM_HOROVOD=on -x OMP_NUM_THREADS \
      "${PYTHON:-/usr/bin/python3}" "$src/bench/small_allreduce.py" </dev/null 2>&1) ||
      { echo "$r" | tail -n 20; echo "run-small-allreduce.sh: the $kind run failed (library $lib)" >&2; exit 1; }
    us=$(echo "$r" | sed -n 's/^us\/call \([0-9.]*\).*/\1/p')
    [ -n "$us" ] || { echo "$r"; exit 1; }
    echo "$kind $us" | tee -a "$out"
  done
done
"${PYTHON:-/usr/bin/python3}" - "$out" <<'PY'
import statistics, sys
runs = {"after": [], "before": []}
for line in open(sys.argv[1]):
    kind, us = line.split()
    runs[kind].append(float(us))
a, b = statistics.median(runs["after"]), statistics.median(runs["before"])
print("medians: after %.1f us/call, before %.1f; after / before %.3f (lower is faster)" % (a, b, a / b))
PY
