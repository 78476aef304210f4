#!/bin/sh
# The shared-memory allreduce (HVDSHIM_SHM=auto, the default for ranks that
# share a host), checked against the reference every rank computes:
#  1. every dtype and op, sizes 0..300 k elements, a different random order
#     on every rank from 3 threads; every rank's bytes identical: np 2, 3, 4,
#     with small pieces (many pieces, uneven slices, a tail) and the default;
#  2. the cross-host path (HVDSHIM_TEST_SHM_HOSTS: consecutive ranks as
#     hosts; a local reduce-scatter, MPI per slice across, a local
#     allgather): 2 hosts x 2 ranks, 3 x 2; a joined rank through it;
#  3. the start line says what is used, and why not (one rank per host,
#     hosts that cannot be split evenly, HVDSHIM_SHM=off); and how waits
#     wait: never spinning with more ranks on the host than CPUs;
#  4. a rank killed while its peers wait in the shared segment: the job ends
#     within 30 s naming it, with a non-zero status;
#  5. a /dev/shm too small for the segment: every rank on MPI, one warning;
#  6. nothing is left in /dev/shm.
. "$(dirname "$0")/../lib.sh"
need_mpirun
# the engine's segments (/dev/shm/hvdshim-PID-...) whose maker has ended
# (another test running beside this one has live ones)
shm_orphans() {
  for _f in $(ls /dev/shm 2>/dev/null | grep '^hvdshim-[0-9]*-' || true); do
    _p=${_f#hvdshim-}
    [ -d "/proc/${_p%%-*}" ] || echo "$_f"
  done
}
before=$(shm_orphans)
run_random() { # NP SETTINGS... : engine_test random with the settings (NAME=VALUE)
  _np=$1
  shift
  _x=
  for _s in "$@"; do _x="$_x -x $_s"; done
  # shellcheck disable=SC2086
  mpi "$_np" $_x -x HVDSHIM_LOG_LEVEL=info "$ENGINE_TEST" random 33 60 3 3 >"$TMP/out" 2>&1 ||
    { cat "$TMP/out"; fail "engine_test random at np=$_np with $*"; }
  expect_ok_lines "$TMP/out" "$_np"
  used=$(grep -o "shared memory .*" "$TMP/out" | sort -u)
}
# (SHM_SHORT=1, check-sanitize: np=2 and 4 on one host, 2 x 2 across: the
# same paths, under ASan at a third of the time)
nps="2 3 4"
[ "${SHM_SHORT:-0}" = 1 ] && nps="2 4"
for np in $nps; do
  for buf in 40010 512K; do
    run_random $np HVDSHIM_SHM_BUFFER=$buf
    case $used in "shared memory $np rank(s) per host x 1 host(s), "*) ;;
      *) cat "$TMP/out"; fail "np=$np: the shared-memory path was not used: $used" ;; esac
    case $used in *"waits sleep (more ranks than CPUs)") spins=no ;; *"; waits spin"*) spins=yes ;;
      *) cat "$TMP/out"; fail "np=$np: the start line does not say how waits wait: $used" ;; esac
    [ "$spins" = "$([ "$(cpus)" -ge $np ] && echo yes || echo no)" ] ||
      fail "np=$np on $(cpus) CPUs: $used"
  done
  pass "np=$np: every dtype and op through shared memory (40000- and 524288-byte pieces: HVDSHIM_SHM_BUFFER=40010 rounds down to 64-byte units), ranks identical; waits spin: $spins ($(cpus) CPUs)"
done
run_random 4 HVDSHIM_TEST_SHM_HOSTS=2 HVDSHIM_SHM_BUFFER=40010
[ "${used%%;*}" = "shared memory 2 rank(s) per host x 2 host(s), 40000-byte pieces" ] || { cat "$TMP/out"; fail "2x2: $used"; }
if [ "${SHM_SHORT:-0}" != 1 ]; then
  run_random 6 HVDSHIM_TEST_SHM_HOSTS=3
  [ "${used%%;*}" = "shared memory 2 rank(s) per host x 3 host(s), 524288-byte pieces" ] || { cat "$TMP/out"; fail "3x2: $used"; }
fi
pass "across hosts (2 x 2$([ "${SHM_SHORT:-0}" = 1 ] || echo " and 3 x 2") ranks): every dtype and op, ranks identical"
mpi 4 -x HVDSHIM_TEST_SHM_HOSTS=2 "$ENGINE_TEST" join 2 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "join across hosts"; }
expect_ok_lines "$TMP/out" 4
pass "a joined rank takes part through the shared segment and across hosts"

run_random 4 HVDSHIM_TEST_SHM_HOSTS=4
[ "$used" = "shared memory off (one rank per host)" ] || { cat "$TMP/out"; fail "one rank per host: $used"; }
run_random 3 HVDSHIM_TEST_SHM_HOSTS=2
[ "$used" = "shared memory off (HVDSHIM_TEST_SHM_HOSTS=2 does not divide 3 ranks)" ] || { cat "$TMP/out"; fail "3 ranks, 2 hosts: $used"; }
run_random 2 HVDSHIM_SHM=off
[ "$used" = "shared memory off" ] || { cat "$TMP/out"; fail "HVDSHIM_SHM=off: $used"; }
mpi 2 -x HVDSHIM_SHM_BUFFER=1K "$ENGINE_TEST" collectives >"$TMP/out" 2>&1 && fail "HVDSHIM_SHM_BUFFER=1K was accepted"
grep -q "HVDSHIM_SHM_BUFFER" "$TMP/out" || { cat "$TMP/out"; fail "no line naming HVDSHIM_SHM_BUFFER"; }
pass "the start line names the path or why shared memory is off; a too small piece is refused"

# Open MPI on one host: hvdshim starts MPI with the ob1 PML and without the
# ofi BTL (their network probes took 200 ms of MPI_Init_thread with Open
# MPI 4.1, 1 s with Open MPI 6), unless the user (mpirun --mca, the
# environment, ~/.openmpi/mca-params.conf) or the site chose a PML, or set
# the BTLs; an exclusion list like Debian's "pml = ^ucx" is no choice of a
# PML.  (lib.sh sets both for Open MPI 5 and 6: unset here but where given.)
if [ "${MPI_KIND:-ompi}" != hydra ]; then
  pml_line() { # SETTINGS... : the start line's MPI part of engine_test collectives at np=2
    (
      unset OMPI_MCA_pml OMPI_MCA_btl
      _x=
      for _s in "$@"; do _x="$_x -x $_s"; done
      # shellcheck disable=SC2086
      mpi 2 $_x -x HVDSHIM_LOG_LEVEL=info "$ENGINE_TEST" collectives >"$TMP/out" 2>&1
    ) || { cat "$TMP/out"; fail "engine_test with $*"; }
    line=$(grep -o "hvdshim\[1\]: engine started: 2 rank(s), MPI [^,]*" "$TMP/out" | sed 's/^.*, MPI //')
  }
  mkdir -p "$TMP/home/.openmpi"
  pml_line
  first=$line
  case $line in *"one host: Open MPI's ob1 PML"*) ;; *) cat "$TMP/out"; fail "one host, nothing chosen: $line" ;; esac
  printf 'pml_base_verbose = 0\npml = ^ucx\n' >"$TMP/home/.openmpi/mca-params.conf"
  pml_line HOME="$TMP/home"
  case $line in *"ob1 PML"*) ;; *) cat "$TMP/out"; fail "an exclusion list in ~/.openmpi/mca-params.conf: $line" ;; esac
  printf '# ours\n pml = ob1\n' >"$TMP/home/.openmpi/mca-params.conf"
  pml_line HOME="$TMP/home"
  case $line in *"ob1 PML"*) cat "$TMP/out"; fail "a PML chosen in ~/.openmpi/mca-params.conf: $line" ;; esac
  pml_line OMPI_MCA_pml=ob1 OMPI_MCA_btl=^ofi
  [ "$line" = "initialized by hvdshim" ] || { cat "$TMP/out"; fail "OMPI_MCA_pml and OMPI_MCA_btl given: $line" ;}
  pass "Open MPI on one host: started with ob1 ('$first' without a choice) unless a PML was chosen (environment, ~/.openmpi); Debian's exclusion list is no choice"
fi

# /dev/shm too small for the segment (a private 16 MiB tmpfs in a mount
# namespace): every rank falls back to MPI, the cause is named, the job runs
if command -v unshare >/dev/null && unshare -m sh -c 'mount -t tmpfs -o size=16M tmpfs /dev/shm' 2>/dev/null; then
  unshare -m sh -c 'mount -t tmpfs -o size=16M tmpfs /dev/shm && exec "$@"' sh \
    sh -c ". '$top_srcdir/tests/lib.sh'; need_mpirun; mpi 2 -x HVDSHIM_SHM_BUFFER=16M -x HVDSHIM_LOG_LEVEL=info '$ENGINE_TEST' random 33 60 3 3" \
    >"$TMP/full" 2>&1 || { cat "$TMP/full"; fail "a full /dev/shm: the job failed"; }
  expect_ok_lines "$TMP/full" 2
  grep -q "warning.*shared-memory allreduce off, MPI used instead: no room for .* bytes in /dev/shm: No space left on device" "$TMP/full" ||
    { cat "$TMP/full"; fail "a full /dev/shm: no warning naming the cause"; }
  [ "$(grep -c "warning.*shared-memory allreduce off" "$TMP/full")" = 1 ] || { cat "$TMP/full"; fail "a full /dev/shm: more than one warning"; }
  grep -q "shared memory off (a rank could not map the segment: see the host's first rank)" "$TMP/full" ||
    { cat "$TMP/full"; fail "a full /dev/shm: rank 1's start line"; }
  pass "/dev/shm too small: one warning naming the cause, every rank on MPI, results right"
else
  echo "(a full /dev/shm not tried: no mount namespace here)"
fi

# a rank killed inside the data path (64 MiB sums: most of the time is spent
# there): with the launcher's default policy, and with Open MPI's
# --enable-recovery, which leaves ending the job to the shim's watchdog (that
# mpirun then reports status 0 whatever the ranks' status: not checked)
kill_rank1() { # NAME MPIRUN-OPTIONS...
  _name=$1
  shift
  T=90 mpi 3 "$@" "$ENGINE_TEST" big 64 0 >"$TMP/$_name" 2>&1 &
  job=$!
  i=0
  until grep -q "big iteration 3" "$TMP/$_name" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le 600 ] || { cat "$TMP/$_name"; fail "$_name: no progress within 60 s"; }
    sleep 0.1
  done
  victim=
  for p in $(pgrep -f "engine_test big 64 0" || true); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = engine_test ] || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1\|PMI_RANK=1" && victim=$p
  done
  [ -n "$victim" ] || { cat "$TMP/$_name"; fail "$_name: rank 1 not found"; }
  t0=$(date +%s%3N)
  kill -9 "$victim"
  wait $job
  rc=$?
  took=$(($(date +%s%3N) - t0))
  [ "$took" -lt 30000 ] || { cat "$TMP/$_name"; fail "$_name: the job took $took ms to end"; }
  sleep 1
  [ -z "$(pgrep -f "engine_test big 64 0" || true)" ] || fail "$_name: processes left behind"
}
kill_rank1 default
# (Hydra's proxy presets the status of the ranks it kills in a cleanup to 0,
# and in about 1 run of 6 here reports 0 for the whole job, with no banner:
# the victim's SIGKILL lost in its forced_cleanup logic, MPICH 4.2.1; not
# the shim's to change, so there only the job's end and what is left are
# checked)
if [ "$rc" = 0 ] && [ "$MPI_KIND" = hydra ]; then
  named="Hydra lost its status and banner (its cleanup's race)"
else
  named="rank named"
  [ "$rc" != 0 ] || { cat "$TMP/default"; fail "default: the job ended with status 0 after a rank was killed"; }
  # the launcher names the rank (Open MPI), or says a process was killed with
  # signal 9 (MPICH's Hydra: its PID line names whichever rank it saw end
  # first, not always the victim)
  tr -s '\n ' '  ' <"$TMP/default" | grep -q "lost rank 1 \|process rank 1 with PID .* exited on signal 9\|BAD TERMINATION .* EXIT CODE: 9" ||
    { cat "$TMP/default"; fail "default: the lost rank is not named"; }
fi
pass "rank 1 killed in the shared-memory data path: the job ended after $took ms with status $rc, $named"
case $MPI_KIND in
  ompi | ompi5)
    kill_rank1 recovery --enable-recovery
    grep -q "lost rank 1 (pid $victim on .*): the process is gone" "$TMP/recovery" ||
      { cat "$TMP/recovery"; fail "recovery: the shim's watchdog did not name the lost rank"; }
    pass "the same under mpirun --enable-recovery: the watchdog named rank 1 and ended the job after $took ms"
    ;;
esac

left=$(shm_orphans | grep -v -x -F "$before" || true)
[ -z "$left" ] || { ls -l /dev/shm; fail "segments left in /dev/shm: $left"; }
pass "nothing left in /dev/shm"
