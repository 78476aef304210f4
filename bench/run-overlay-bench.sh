#!/bin/sh
# The rank-private overlay's and the replica guard's costs (issue 14).
#   bench/run-overlay-bench.sh [ROUNDS [PARTS]]   (from a build tree; make bench-overlay)
# PARTS: which of the four below (default 1234; e.g. 34).
# 1. saves/s of a checkpoint loop: plain, as rank 1 with the overlay, as
#    rank 1 writing real files; ratios to plain.
# 2. ms per optimizer step at np=2 with the guard every step vs off.
# 3. s per save and per load of a large checkpoint (OVERLAY_BENCH_MB, 256).
# 4. ns per os.pread on an fd that is not a copy: plain, as rank 1 with the
#    overlay and without it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=${top_builddir:-$(cd "$here/.." && pwd)}
LIB="$top/.libs/libhvdshim.so"
PY=${PYTHON:-/usr/bin/python3}
ROUNDS=${1:-5}
PARTS=${2:-1234}
part() { case $PARTS in *$1*) return 0 ;; esac; return 1; }
B="$here/overlay_bench.py"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
rate() { sed -n 's/^\(\[rank 1\] \)\{0,1\}saves\/s \([0-9.]*\).*/\2/p'; }
as_rank1() { env LD_PRELOAD="$LIB" OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 \
  OMPI_COMM_WORLD_LOCAL_SIZE=2 HVDSHIM_WORKER_STDOUT=1 TMPDIR="$TMP" "$@"; }
part 1 && for r in $(seq "$ROUNDS"); do
  rm -rf "$TMP/d"; p=$("$PY" "$B" saves "$TMP/d" | rate)
  rm -rf "$TMP/d"; o=$(as_rank1 "$PY" "$B" saves "$TMP/d" | rate)
  rm -rf "$TMP/d"; a=$(as_rank1 HVDSHIM_SAVE_RANKS=all "$PY" "$B" saves "$TMP/d" | rate)
  echo "saves/s plain $p  rank1-overlay $o  rank1-real $a  overlay/plain $(echo "$o $p" | awk '{printf "%.3f", $1/$2}')  overlay/real $(echo "$o $a" | awk '{printf "%.3f", $1/$2}')"
done
# 3. a large checkpoint (issue 52): s per save and per load, plain (rank 0's
#    files), as rank 1 keeping every byte, as rank 1 freeing those rank 0's hold
MB=${OVERLAY_BENCH_MB:-256}
big() { sed -n 's/^\(\[rank 1\] \)\{0,1\}s\/save \([0-9.]*\) s\/load \([0-9.]*\).*/\2 \3/p'; }
part 3 && for r in $(seq "$ROUNDS"); do
  rm -rf "$TMP/b" "$TMP/t" && mkdir -p "$TMP/t"
  p=$("$PY" "$B" bigsaves "$TMP/b" "$MB" | big)
  if [ $((r % 2)) = 1 ]; then
    k=$(as_rank1 TMPDIR="$TMP/t" HVDSHIM_PRIVATE_BYTES=0 "$PY" "$B" bigsaves "$TMP/b" "$MB" | big)
    f=$(as_rank1 TMPDIR="$TMP/t" "$PY" "$B" bigsaves "$TMP/b" "$MB" | big)
  else
    f=$(as_rank1 TMPDIR="$TMP/t" "$PY" "$B" bigsaves "$TMP/b" "$MB" | big)
    k=$(as_rank1 TMPDIR="$TMP/t" HVDSHIM_PRIVATE_BYTES=0 "$PY" "$B" bigsaves "$TMP/b" "$MB" | big)
  fi
  # fields: 6 7 plain's save and load, 9 10 keep-all's, 12 13 free's
  echo "$MB MiB: s/save s/load plain $p  rank1-keep-all $k  rank1-free $f" |
    awk '{printf "%s  save free/plain %.2f  free/keep-all %.2f  load free/plain %.2f\n", $0, $12/$6, $12/$9, $13/$7}'
done
# 4. an fd call on an fd that is no copy (a training step's I/O): ns per
#    os.pread, plain, as rank 1 with the overlay and as rank 1 without it
#    (HVDSHIM_SAVE_RANKS=all: the same preload, the fd calls' off path)
head -c 4096 /dev/zero >"$TMP/f"
nsread() { sed -n 's/^\(\[rank 1\] \)\{0,1\}ns\/read //p'; }
part 4 && for r in $(seq "$ROUNDS"); do
  p=$("$PY" "$B" reads "$TMP/f" | nsread)
  o=$(as_rank1 "$PY" "$B" reads "$TMP/f" | nsread)
  a=$(as_rank1 HVDSHIM_SAVE_RANKS=all "$PY" "$B" reads "$TMP/f" | nsread)
  echo "ns/read plain $p  rank1-overlay $o  rank1-real $a  overlay-real $(echo "$o $a" | awk '{printf "%+.1f", $1-$2}')"
done
step() { HVDSHIM_CHECK_STEPS=$1 "$top/launcher/hvdrun" --oversubscribe -np 2 -- "$PY" "$B" steps 2>/dev/null |
  sed -n 's/^ms\/step //p'; }
part 2 && for r in $(seq "$ROUNDS"); do
  on=$(step 1) off=$(step 0)
  echo "ms/step np=2 guard-every-step $on  guard-off $off  cost per check $(echo "$on $off" | awk '{printf "%.4f ms (%.3fx)", $1-$2, $1/$2}')"
done
exit 0
