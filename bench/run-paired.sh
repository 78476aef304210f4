#!/bin/sh
# Two builds of the library, run after run (alternating), on the same
# script at np=2: samples/s and rank 0's CPU time per step (every thread of
# the process) for each, their medians and the ratio.  On a machine whose
# speed moves from run to run, pairs say more than two sets of medians.
#   bench/run-paired.sh LIB_BEFORE [N]     (from the build directory; N pairs, default 8)
# MODEL (tiny), BATCH (32), STEPS (2000): bench/torch_train.py's options.
# AFTER_ENV="NAME=VALUE ...": settings for the "after" runs only (the same
# library on both sides then compares a setting: LIB_BEFORE = .libs/libhvdshim.so).
set -e
build=${top_builddir:-$(pwd)}
src=$(cd "$(dirname "$0")/.." && pwd)
before=${1:?usage: run-paired.sh LIB_BEFORE [N]}
after=$build/.libs/libhvdshim.so
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
i=0
while [ $i -lt "${2:-8}" ]; do
  i=$((i + 1))
  for kind in after before; do
    lib=$after xs=
    for v in ${AFTER_ENV:-}; do xs="$xs -x $v"; done
    [ $kind = before ] && lib=$before xs=
    # shellcheck disable=SC2086
    r=$(mpirun -np 2 -x LD_PRELOAD="$lib" -x OMP_NUM_THREADS $xs "${PYTHON:-/usr/bin/python3}" "$src/bench/torch_train.py" \
      --model "${MODEL:-tiny}" --batch "${BATCH:-32}" --steps "${STEPS:-2000}" --switches </dev/null 2>&1) ||
      { echo "$r" | tail -n 20; echo "run-paired.sh: the $kind run failed (library $lib${xs:+, settings$xs})" >&2; exit 1; }
    echo "$kind $(echo "$r" | sed -n 's/^samples\/s \([0-9.]*\).*/\1/p') $(echo "$r" | sed -n 's/^cpu ms\/step \([0-9.]*\).*/\1/p')" >>"$out"
    tail -1 "$out"
  done
done
"${PYTHON:-/usr/bin/python3}" - "$out" <<'PY'
import statistics, sys
runs = {"after": [], "before": []}
for line in open(sys.argv[1]):
    kind, sps, cpu = line.split()
    runs[kind].append((2 * float(sps), float(cpu)))  # samples/s of both ranks
a, b = runs["after"], runs["before"]
won = sum(x[0] > y[0] for x, y in zip(a, b))
med = lambda v, k: statistics.median(x[k] for x in v)
print("medians: after %.0f samples/s, %.3f CPU ms/step; before %.0f, %.3f" % (med(a, 0), med(a, 1), med(b, 0), med(b, 1)))
print("ratio after / before: samples/s %.3f, CPU per step %.3f; after faster in %d of %d pairs"
      % (med(a, 0) / med(b, 0), med(a, 1) / med(b, 1), won, len(a)))
PY
