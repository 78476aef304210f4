#!/bin/sh
# The engine's multi-rank cases, one table: each row runs engine_test (C API
# only, no preload) under mpirun once and prints its own PASS or FAIL line;
# every rank must end with its OK line, and a row may ask for more (below).
# Every row runs, then the script fails if any row did.
# ENGINE_SKIP="NAME..." leaves rows out (check-sanitize: memory).
#
# Columns, separated by '|': the row's name | ranks | settings (NAME=VALUE
# ...) | engine_test's arguments | what it shows (the PASS line) | checks,
# each "all:TEXT" (every rank printed TEXT) or "one:TEXT" (some rank did).
#
# The rows:
#   random-npN     random tensors (every dtype and op, sizes 0..300k)
#                  submitted in a different random order on each rank from
#                  3 threads, 3 iterations, checked against the reference
#                  each rank computes
#   collectives-npN  broadcast from every root, allgather with per-rank row
#                  counts (some zero), barrier, callbacks, hvd_test and
#                  bounded waits
#   adopt          a program that initializes and finalizes MPI itself:
#                  MPI_Init is upgraded to MPI_THREAD_MULTIPLE, the engine
#                  adopts MPI and stops at MPI_Finalize
#   memory         steady state: 10,000 steps of 20 tensors after 1,000 of
#                  warm-up (each step waits for its tensors, so >= 10,000
#                  engine cycles); RSS after the steps may not exceed RSS
#                  after warm-up by more than 1 MiB
#   mismatch       ranks disagreeing on count, dtype, op or root: every
#                  rank's handle fails with a message naming the tensor and
#                  the ranks; then the engine goes on
#   scatter-npN    hvd_reducescatter_async and hvd_alltoall_async: every
#                  dtype and op with a row count the ranks do not divide
#                  (Horovod's split), uneven alltoall splits with zeros, over
#                  every rank and over a process set; with the last rank
#                  joined (identity contribution, averages over the others,
#                  nothing sent); mismatched row sizes and negative splits
#   process-sets-npN  hvd_process_set_add/remove, hvd_next_process_set: two
#                  overlapping sets and a one-rank set, their operations
#                  interleaved with global ones in a different order on
#                  every rank, 30 times (the cache answers them after the
#                  first); results against formulas over the members;
#                  broadcast, allgather and barrier within a set; errors (a
#                  non-member, an unknown set, a root outside the set,
#                  member lists that differ); members that joined; removal
#   join-last, join-coordinator  a rank that finishes early joins
#                  (hvd_shutdown, or a normal exit): the others' collectives
#                  complete without it, averages over the ranks still
#                  running, a broadcast from it fails on every rank, every
#                  process exits 0; after its hvd_shutdown the early rank
#                  has no thread left but its main one
#   hvd-join-npN   hvd_join (Horovod's join): ranks with fewer steps join
#                  early and take part in the others' allreduces and
#                  allgathers without data; every rank's join returns the
#                  last rank to join, then all go on (twice: join is
#                  reusable)
#   join-vs-exit   a rank that joins while the others exit gets
#                  HVD_ERR_SHUTDOWN, no hang
. "$(dirname "$0")/../lib.sh"
need_mpirun
cat >"$TMP/rows" <<'EOF'
random-np1 | 1 | | random 11 60 3 3 | random allreduce at np=1
random-np2 | 2 | | random 22 60 3 3 | random allreduce at np=2
random-np3 | 3 | | random 33 60 3 3 | random allreduce at np=3
random-np4 | 4 | | random 44 60 3 3 | random allreduce at np=4
collectives-np1 | 1 | | collectives | broadcast, allgather, barrier, callbacks at np=1
collectives-np2 | 2 | | collectives | broadcast, allgather, barrier, callbacks at np=2
collectives-np3 | 3 | | collectives | broadcast, allgather, barrier, callbacks at np=3
collectives-np4 | 4 | | collectives | broadcast, allgather, barrier, callbacks at np=4
adopt | 2 | | adopt | adopted MPI
memory | 2 | HVDSHIM_CYCLE_TIME=0.05 | memory 10000 | no growth over 10,000 steps | one:memory:
mismatch | 3 | | mismatch | mismatches reported on every rank | one:allreduce 'bad_count': ranks disagree on the count: 10 elements on ranks 0,1; 11 elements on rank 2
scatter-np2 | 2 | | scatter | reducescatter (9 dtypes x 5 ops) and alltoall at np=2, over every rank, a process set and with a joined rank | all:reducescatter and alltoall done
scatter-np3 | 3 | | scatter | reducescatter and alltoall at np=3 | all:reducescatter and alltoall done
scatter-np4 | 4 | | scatter | reducescatter and alltoall at np=4 | all:reducescatter and alltoall done
process-sets-np3 | 3 | | process-sets | process sets at np=3: overlapping sets interleaved with global operations, cached, joined members, errors, removal | all:process sets done
process-sets-np4 | 4 | | process-sets | process sets at np=4 | all:process sets done
process-sets-np5 | 5 | | process-sets | process sets at np=5 | all:process sets done
join-last | 3 | | join 2 | the last rank finishing early joins; the job ends with 0 | one:'j.deadroot': root rank 2 has finished | one:engine_test[2]: 1 thread left after hvd_shutdown
join-coordinator | 3 | | join 0 | the coordinator (rank 0) finishing early joins; the job ends with 0 | one:'j.deadroot': root rank 0 has finished | one:engine_test[0]: 1 thread left after hvd_shutdown
hvd-join-np2 | 2 | | hvd-join | hvd_join at np=2: uneven steps complete over the ranks still stepping; join returns the last rank, twice | one:hvd_join with uneven steps, twice, last rank 1
hvd-join-np3 | 3 | | hvd-join | hvd_join at np=3 | one:hvd_join with uneven steps, twice, last rank 2
hvd-join-np4 | 4 | | hvd-join | hvd_join at np=4 | one:hvd_join with uneven steps, twice, last rank 3
join-vs-exit | 3 | T=60 | join-vs-exit | hvd_join while the other ranks exit: fails with a line naming why, no hang | one:hvd_join failed as expected: hvd_join: a rank has finished (hvd_shutdown or exit)
EOF
# check FILE NP KIND:TEXT: every rank (all) or some rank (one) printed TEXT
check() {
  _n=$(grep -cF -- "${3#*:}" "$1" || true)
  case ${3%%:*} in
    all) [ "$_n" = "$2" ] ;;
    one) [ "$_n" -ge 1 ] ;;
    *) echo "engine.sh: unknown check '$3'"; return 1 ;;
  esac
}
trim() { printf '%s' "$1" | sed 's/^ *//; s/ *$//'; }
failed=0
while IFS='|' read -r name np settings args what checks; do
  name=$(trim "$name") np=$(trim "$np") settings=$(trim "$settings") args=$(trim "$args") what=$(trim "$what")
  case " ${ENGINE_SKIP-} " in *" $name "*) echo "(left out: $name)"; continue ;; esac
  out="$TMP/$name.out"
  # shellcheck disable=SC2086,SC2163 # (split on purpose; export NAME=VALUE)
  (
    for kv in $settings; do export "$kv"; done
    mpi "$np" "$ENGINE_TEST" $args
  ) >"$out" 2>&1
  rc=$?
  why=
  [ $rc = 0 ] || why="exit status $rc"
  [ -n "$why" ] || [ "$(grep -c " OK stats" "$out" || true)" = "$np" ] || why="expected $np OK lines, got $(grep -c " OK stats" "$out" || true)"
  rest=$checks
  while [ -z "$why" ] && [ -n "$(trim "$rest")" ]; do
    c=$(trim "${rest%%|*}")
    case $rest in *'|'*) rest=${rest#*|} ;; *) rest= ;; esac
    if ! check "$out" "$np" "$c"; then
      case $c in all:*) why="not all $np ranks printed '${c#*:}'" ;; *) why="no rank printed '${c#*:}'" ;; esac
    fi
  done
  if [ -z "$why" ]; then
    pass "$name: $what"
    [ "$name" = memory ] && grep "memory:" "$out"
  else
    cat "$out"
    echo "FAIL: $name ($what): $why"
    failed=$((failed + 1))
  fi
done <"$TMP/rows"
[ $failed = 0 ] || fail "$failed of the engine's cases failed"
