#!/bin/sh
# make check-stacks: the project on the current Debian stacks, each in a
# chroot built from Debian's archive (tools/stack-chroot.sh):
#
#   trixie        Python 3.13, torch 2.6,  Open MPI 5.0   unit, engine, native, launcher and horovod
#                                                         suites (not Horovod's own), the PyTorch
#                                                         suites that launch and end jobs (shard's
#                                                         launches, elastic's where the MPI takes part)
#   trixie-mpich  Python 3.13, torch 2.6,  MPICH 4.2      the same without the native suite, the
#                                                         launchers but hvdrun (Hydra), shard,
#                                                         fidelity, Horovod's recipes and warm.sh;
#                                                         with stand-aside (DDP on torch 2.6)
#                 (the trixie stacks run what differs there, the MPI: the adapter's other
#                 behaviours and the tools are Python over torch, run on Debian 12's torch 1.13
#                 and sid's 2.14)
#   sid           Python 3.14, torch 2.14, Open MPI 6.0   unit, engine (where Open MPI 6 takes part:
#                                                         elastic, shm, start-fail), PyTorch (with
#                                                         HuggingFace transformers and accelerate,
#                                                         torch-ignite, skorch), launcher, fault suites
#   package       the Debian packages built here (tools/build-deb.sh, lintian clean) and installed
#                 with apt into a Debian 12 chroot that never saw the sources: the bundled example
#                 under /usr/bin/hvdrun, hvdshim-info, man; then purged (tests/stacks/package.sh)
#
# Each stack builds the project inside its chroot against that chroot's own
# Python, torch and MPI (a copy of the sources) and runs its suites; one
# summary line per stack: "check-stacks: NAME (glibc V, Python V, torch V,
# MPI V): N passed, N failed, N skipped", the versions those of the chroot's
# Debian packages (the archive moves under CI: a new point release shows in
# the line), or "check-stacks: NAME SKIPPED: reason" where chroots cannot be
# made here (not root, no archive).  Ends with the total line,
# "check-stacks: all stacks: N passed, N failed, N skipped".  Logs are read
# as text whatever bytes they hold (a test's output may hold a NUL byte).
#
# Usage: check-stacks.sh [--prepare] SRCDIR BUILDDIR
#   --prepare: only build (or update) the stacks' chroots, nothing else;
#   check-all.sh starts it niced beside `make check`, so that the downloads
#   and unpacking (about 5 minutes) are done when the stacks' turn comes
# Environment: HVDCHECK_STACKS_CACHE  where the chroots live and are reused
#                                    (default BUILDDIR/stacks-cache; about 2 GB each)
#              HVDCHECK_STACKS        the stacks to run (default "trixie trixie-mpich sid package")
#              HVDCHECK_STACKS_TIME   seconds one stack's suites may take (default 2400)
#              HVDCHECK_DEADLINE      when (date +%s) the whole run must have ended (.ci/run
#                                    sets it: CI's 90 minutes): a stack's suites are ended
#                                    in time to report, naming the tests that had not
#                                    finished, and a stack not begun by then fails unrun
#              HVDCHECK_JOBS    test scripts run at once (make -j; default: the cores,
#                                    nproc): a script is idle a third of its time
#                                    (single-process phases, launches, waits)
#              CUDA_HOME             the CUDA toolkit whose headers sid builds with (default /usr/local/cuda)
set -u
prepare=0
[ "${1:-}" = --prepare ] && { prepare=1; shift; }
src=$(cd "${1:?usage: check-stacks.sh SRCDIR BUILDDIR}" && pwd)
build=$(cd "${2:?usage: check-stacks.sh SRCDIR BUILDDIR}" && pwd)
cache=${HVDCHECK_STACKS_CACHE:-$build/stacks-cache}
stacks=${HVDCHECK_STACKS:-trixie trixie-mpich sid package}
limit=${HVDCHECK_STACKS_TIME:-2400}
deadline=${HVDCHECK_DEADLINE:-0}
jobs=${HVDCHECK_JOBS:-$(nproc 2>/dev/null || echo 1)}
tool="$src/tools/stack-chroot.sh"
cuda_src=${CUDA_HOME:-/usr/local/cuda}  # its headers: sid's build has the GPU path
PKGS="build-essential autoconf automake libtool pkg-config libffi-dev python3 python3-numpy python3-torch
libpython3-dev libopenblas0-pthread procps binutils iproute2 openmpi-bin libopenmpi-dev
python3-pytest python3-mock python3-cloudpickle python3-packaging"
pass=0 fail=0 skip=0

say() { echo "check-stacks: $*"; }
total() {
  say "all stacks: $pass passed, $fail failed, $skip skipped"
  [ $fail -eq 0 ]
  exit
}

# the sources, as git knows them (or the whole tree, build outputs aside)
copy_sources() {
  rm -rf "$1" && mkdir -p "$1" || return 1
  if [ -d "$src/.git" ] && command -v git >/dev/null 2>&1; then
    (cd "$src" && { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 tar cf -) | tar xf - -C "$1"
  else
    (cd "$src" && tar cf - --exclude=./stacks-cache --exclude='*.o' --exclude='*.lo' --exclude=.libs .) | tar xf - -C "$1"
  fi
}

# show N FILE: its last N lines, as text (NUL bytes shown as ^@), so that
# this output stays text for whoever reads it with grep
show() { tail -n "$1" "$2" 2>/dev/null | sed 's/\x0/^@/g'; }

# upto MAX: MAX seconds, or what is left before HVDCHECK_DEADLINE less 2
# minutes (the report, the other stacks' lines, the unmounting), whichever
# is less; at least 1 (timeout 0 would be no limit at all)
upto() {
  b=$1
  [ "$deadline" -gt 0 ] && [ $((deadline - $(date +%s) - 120)) -lt "$b" ] && b=$((deadline - $(date +%s) - 120))
  [ "$b" -gt 0 ] && echo "$b" || echo 1
}
# budget: the seconds a stack's suites may run now
budget() { upto "$limit"; }

# stack_versions ROOT MPINAME MPIPACKAGE: "glibc V, Python V, torch V, MPI V",
# each the version of the chroot's Debian package ("?" where one is missing)
stack_versions() {
  # shellcheck disable=SC2016
  chroot "$1" /bin/sh -c '
    v() { x=$(dpkg-query -W -f "\${Version}" "$1" 2>/dev/null); echo "${x:-?}"; }
    py=$(dpkg -S "$(readlink -f /usr/bin/python3)" 2>/dev/null | cut -d: -f1)
    echo "glibc $(v libc6), Python $(v "${py:-python3}"), torch $(v python3-torch), $1 $(v "$2")"' sh "$2" "$3"
}

mkdir -p "$cache"
# one run at a time per cache: another run's exit would unmount the chroots
# under this one, and the source copies are shared
# (a run waits up to an hour for another, or until 2 minutes before
# HVDCHECK_DEADLINE: check-all's --prepare may still be downloading when
# the stacks' turn comes)
exec 9>"$cache/.lock"
wait_s=$(upto 3600)
if command -v flock >/dev/null 2>&1 && ! flock -w $wait_s 9; then
  say "FAILED: another check-stacks run held $cache for $wait_s s (check-all's --prepare still downloading; or set HVDCHECK_STACKS_CACHE)"
  fail=1
  total
fi
mounted=""
trap 'for d in $mounted; do sh "$tool" umount "$d"; done' EXIT INT TERM

for name in $stacks; do
  # CI's deadline (near as a minute): the stack fails unrun, so that the
  # run still ends with its lines and totals
  if [ $prepare = 0 ] && [ "$(budget)" -le 60 ]; then
    say "$name FAILED: not run, too little time left before HVDCHECK_DEADLINE (CI's limit)"
    fail=$((fail + 1))
    continue
  fi
  # the Debian packages, installed as a user would (tests/stacks/package.sh)
  if [ "$name" = package ]; then
    t0=$(date +%s)
    case " $mounted " in *" $cache/bookworm-package "*) ;; *) mounted="$mounted $cache/bookworm-package" ;; esac
    if [ $prepare = 1 ]; then
      if sh "$src/tests/stacks/package.sh" --prepare "$src" "$build" "$cache" >"$cache/package.prepare.log" 2>&1; then
        say "package: chroot ready in $(($(date +%s) - t0)) s"
      else
        tail -5 "$cache/package.prepare.log"
        say "package FAILED: could not build its Debian 12 chroot (log: $cache/package.chroot.log)"
      fi
      continue
    fi
    timeout -k 10 "$(budget)" sh "$src/tests/stacks/package.sh" "$src" "$build" "$cache" >"$cache/package.log" 2>&1 ||
      [ $? != 124 ] || say "package: ran past its time (HVDCHECK_STACKS_TIME or HVDCHECK_DEADLINE) and was ended"
    grep '^package: \(PASS\|FAIL\|SKIPPED\)' "$cache/package.log" | sed 's/^package: /  package: /'
    grep -v '^package: ' "$cache/package.log" | head -40 | sed 's/^/  package: | /'
    line=$(sed -n 's/^package: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' "$cache/package.log")
    set -- ${line:-0 1 0}
    pass=$((pass + $1)) fail=$((fail + $2)) skip=$((skip + $3))
    say "package (Debian packages built here, installed into a Debian 12 chroot): $1 passed, $2 failed, $3 skipped ($(($(date +%s) - t0)) s)"
    continue
  fi
  case $name in
    # the trixie chroot serves both trixie stacks: it holds both MPIs
    trixie) suite=trixie mpicc=mpicc.openmpi mpi="Open MPI:openmpi-bin" extra="mpich libmpich-dev" which=all ;;
    trixie-mpich) suite=trixie mpicc=mpicc.mpich mpi="MPICH:mpich" extra="mpich libmpich-dev" which=mpich ;;
    sid) suite=sid mpicc=mpicc.openmpi mpi="Open MPI:openmpi-bin" extra="python3-transformers python3-accelerate python3-torch-ignite python3-skorch" which=all ;;
    *) say "$name FAILED: unknown stack (trixie, trixie-mpich, sid)"; fail=$((fail + 1)); continue ;;
  esac
  why=$(sh "$tool" why-not "$suite")
  [ -z "$why" ] || { say "$name SKIPPED: $why"; skip=$((skip + 1)); continue; }
  root="$cache/$suite"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  if ! sh "$tool" ensure "$suite" "$root" $PKGS $extra >"$cache/$name.chroot.log" 2>&1; then
    tail -20 "$cache/$name.chroot.log"
    say "$name FAILED: could not build the $suite chroot (log: $cache/$name.chroot.log)"
    fail=$((fail + 1))
    continue
  fi
  case " $mounted " in *" $root "*) ;; *) mounted="$mounted $root" ;; esac
  t1=$(date +%s)
  [ $prepare = 1 ] && { say "$name: chroot ready in $((t1 - t0)) s"; continue; }
  versions=$(stack_versions "$root" "${mpi%%:*}" "${mpi#*:}")
  dir=/root/hvdshim-$name
  copy_sources "$root$dir" || { say "$name ($versions) FAILED: could not copy the sources"; fail=$((fail + 1)); continue; }
  # Horovod's own suite beside the sources, as ../shared is beside them here
  # (tests/horovod/suite.sh; only its two test files: the real package is
  # built for Debian 12's torch)
  ref=reference/horovod-0.28.1/tests
  rm -rf "$root/root/shared"
  if [ -d "$src/../shared/$ref" ]; then
    mkdir -p "$root/root/shared/$ref" && cp "$src/../shared/$ref/"*.py "$root/root/shared/$ref/"
  fi
  # inside: a clean environment, the stack's own Python and MPI
  run() {
    timeout -k 10 "$(budget)" chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LANG=C.UTF-8 TMPDIR=/tmp CI="${CI:-}" /bin/sh -c "cd $dir && $1"
  }
  # sid builds the GPU path too (the CUDA and NCCL headers copied in: the
  # libraries are looked up at run time), so that tests/gpu/fake-nccl.sh
  # runs its ULFM part (a rank dying among NCCL allreduces) on Open MPI 6;
  # Debian 12's build has it already, without ULFM
  cuda=
  rm -rf "$root/root/cuda"
  if [ "$suite" = sid ] && [ -f "$cuda_src/include/cuda_runtime_api.h" ] && [ -f "$cuda_src/include/nccl.h" ]; then
    mkdir -p "$root/root/cuda" && cp -rL "$cuda_src/include" "$root/root/cuda/" && cuda="--with-cuda=/root/cuda"
  fi
  if ! run "./autogen.sh && ./configure PYTHON=/usr/bin/python3 --with-mpi=$mpicc $cuda NVCC=no && make -j$(nproc)" \
    >"$cache/$name.build.log" 2>&1; then
    show 30 "$cache/$name.build.log"
    say "$name ($versions) FAILED: the build failed (log: $cache/$name.build.log)"
    fail=$((fail + 1))
    continue
  fi
  # tests/unit/layers.sh reads the sources' includes and the objects' symbols
  # for the layering: the same on every stack, run on Debian 12 (about 11 s a stack)
  tests=$(run 'make -s print-tests' 2>/dev/null | tr ' ' '\n' | grep -v -x 'tests/unit/layers\.sh' | tr '\n' ' ')
  # The trixie stacks run what differs there from Debian 12 (torch 1.13, Open
  # MPI 4.1) and sid (torch 2.14, Open MPI 6), both of which run everything:
  # the MPI (Open MPI 5's prterun, MPICH 4's Hydra).  So the unit, engine,
  # native, launcher and fault suites, the served horovod package, and of the
  # PyTorch suites those that launch, fail and end jobs in their own ways
  # (shard's launches, fidelity's checkpoints and endings, stand-aside on MPICH,
  # adapter-unit, elastic); not the adapter's other behaviours (side effects,
  # observation, accumulation, injection, the loaders' dealing, fidelity's
  # data and decision cases, examples, split's step-for-step arithmetic,
  # the private files' bytes at checkpoint sizes (libc and torch's writers),
  # Horovod's recipes) nor the tools, which are Python over torch and run
  # on the torch versions either side of trixie's 2.6 (CI's time: split and
  # the recipes were 3.5 minutes there).  MPICH: the same without the native suite
  # and the launchers other than hvdrun (Hydra), and without the suites whose
  # difference from trixie's Open MPI run is torch's arithmetic, the same
  # torch 2.6 (split, fidelity, Horovod's recipes: 4.5 minutes of CI) or the
  # adapter's own logic (shard.sh's sharding, 113 s; errors.sh's messages,
  # 2.5 minutes: the job's end on Hydra is the fault suites'), nor Horovod's own suite,
  # the served package's Python over the engine, whose MPI calls the engine
  # suites run on MPICH (about 2 minutes of CI).  Of the fault suites, a rank
  # killed (kill.sh, Hydra's -disable-auto-cleanup for the watchdog's cases)
  # and a rank's exit status ending the job (exits.sh): about 65 s; the others
  # find Open MPI's launcher by name (sigint.sh), or their negative control
  # cannot tell on Hydra, which ends the whole family itself (orphans.sh).
  [ "$suite" = trixie ] && tests=$(echo "$tests" | tr ' ' '\n' |
    grep -v -E '^tests/torch/(side-effects|observe|accumulate|injection|examples|hf|endless|iterable|fidelity-data|split|private-bytes|file-races)\.sh$|^tests/horovod/recipes\.sh$|^tests/tools/' | tr '\n' ' ')
  # Hosts joining (grow.sh) restarts jobs through hvdrun and the plain
  # launcher (no ULFM): Open MPI 4 (Debian 12), 6 (sid) and Hydra (MPICH)
  # run it; trixie's Open MPI 5 launches as sid's does (prterun).  Horovod's
  # own suite (suite.sh) is the served package's Python over torch and the
  # engine, whose MPI calls the engine suites test on Open MPI 5: it runs on
  # Open MPI 4 and 6 and on MPICH, not again on trixie's Open MPI (63 s);
  # nor a Horovod script's rank ending early (early-end.sh, 17 s).
  # A host cut off and a slow, lossy link (partition.sh, netem.sh) run their
  # cases without ULFM on Debian 12 (Open MPI 4) and their elastic cases on
  # sid (Open MPI 6; about 70 s for both), not under trixie's 5.0, whose
  # launcher ends an elastic job that loses a host.
  # The fault suite (killed, stalled, interrupted ranks; the launcher's
  # processes found by name) runs under Open MPI 4's ORTE (Debian 12) and 6's
  # PRRTE (sid), whose launcher trixie's 5.0 shares (about 2 minutes there),
  # but for the launcher interrupted or killed (sigint.sh, 20 s): 5.0 names
  # the session folder a reaper removes in its own way.  Likewise a script's
  # error ending the job (errors.sh: the adapter's messages, then an abort
  # under PRRTE; 2 minutes there), and a script that distributes itself
  # (stand-aside.sh: torch 2.6's DDP on MPICH, MPI_Init under Open MPI 4
  # and 6; 1.5 minutes).
  [ "$name" = trixie ] && tests=$(echo "$tests" | tr ' ' '\n' | grep -v -E '^tests/torch/(grow|errors|stand-aside)\.sh$|^tests/horovod/(suite|early-end)\.sh$|^tests/launcher/(partition|netem)\.sh$|^tests/faults/' | tr '\n' ' ')tests/faults/sigint.sh
  # The private files' bytes at checkpoint sizes (np=4, 200 MiB, 2 minutes):
  # Debian 12; on sid torch 2.14's writer and the Trainer's checkpoints are
  # freed and read back in tests/torch/hf.sh (every byte, a 1-byte cap)
  [ "$suite" = sid ] && tests=$(echo "$tests" | tr ' ' '\n' | grep -v -x 'tests/torch/private-bytes\.sh' | tr '\n' ' ')
  # The engine's own logic over the MPI (its collectives, fusion, response
  # cache, stall check, roles, settings, timeline, metrics, autotune, output
  # files) runs on Open MPI 4, 5 and MPICH; sid keeps of the engine suites
  # those where Open MPI 6 itself takes part (elastic.sh: ULFM; shm.sh: its
  # shared-memory segments; start-fail.sh: a start failing after MPI's),
  # and its collectives run under every PyTorch suite and Horovod's own
  # suite there (about 150 s of its CPU)
  [ "$suite" = sid ] && tests=$(echo "$tests" | tr ' ' '\n' |
    grep -v -E '^tests/mpi/(engine|fusion-modes|cache-modes|stall|host-poll|rebuild|roles|bad-settings|timeline|security|settings-agree|metrics|autotune)\.sh$' | tr '\n' ' ')
  # (and the test runner's own warm interpreter, tests/unit/warm.sh: Python's, run on trixie's Open MPI stack)
  [ "$which" = mpich ] && tests=$(echo "$tests" | tr ' ' '\n' | grep -E '^tests/(unit|mpi|torch|horovod|gpu)/|^tests/launcher/hvdrun|^tests/faults/(kill|exits|checkpoint)\.sh$' |
    grep -v -E '^tests/torch/(split|fidelity|shard|errors)\.sh$|^tests/horovod/(recipes|suite)\.sh$|^tests/unit/warm\.sh$' | tr '\n' ' ')
  # trixie's Open MPI 5 runs elastic.sh's engine cases and, of its PyTorch
  # cases, those the MPI and its launcher take part in (ELASTIC_TORCH=mpi):
  # the adapter's other behaviours under a death are Python over torch, run
  # on sid (Open MPI 6, torch 2.14); about 90 s of CI
  env=
  # likewise of shard.sh its launches, loader workers and pickling, not the
  # adapter's logic around torch's random state and modules (SHARD_SHORT;
  # about 2 minutes there)
  [ "$name" = trixie ] && env="ELASTIC_TORCH=mpi SHARD_SHORT=1 "
  # Hydra restarts a job to grow or shrink as the Open MPIs do: MPICH runs
  # grow.sh's cases without loader workers (GROW_SHORT), the growth and the
  # shrink to one rank and back; the workers', shard's, an epoch's end and a
  # script without a loader are the adapter's, and so is elastic.sh's
  # Horovod script shrinking to one rank (about a minute and a half)
  [ "$which" = mpich ] && env="GROW_SHORT=1 "
  # sid runs split's cases where torch's own autograd machinery changed since
  # Debian 12's 1.13 (hooks on the accumulated gradient, views of it,
  # checkpointing, closures, autocast, workers from a forkserver), not those
  # of the adapter's logic around the script (which parameters and
  # optimizers it follows, the data's kinds, the replica guard), run on
  # Debian 12 (about 4 minutes of CI); likewise of
  # fidelity-data.sh's the plateau scheduler, the sharded early stopping,
  # two of the three samplers and shard mode's dealing (about a minute), and
  # of shard.sh's the cases after its launches, loader workers and pickling
  # (SHARD_SHORT: random batches without a loader, BatchNorm's statistics,
  # an evaluation that switches modes; about 3 minutes), and of errors.sh's
  # the adapter's own decisions (ERRORS_SHORT: a loader only evaluated, an
  # iterable kept whole, an unused branch, split mode's different paths, a
  # complex parameter; about a minute);
  # and hvdshim-ab's A/B statistics and
  # launches (tests/tools/hvdshim-ab.sh, about 3 minutes there) only on Debian 12,
  # and Horovod's recipes (tests/horovod/recipes.sh: the served package on
  # Horovod's own examples, about 3 minutes there) only on Debian 12, where
  # they are also compared with real Horovod; sid runs Horovod's own suite
  # on torch 2.14 (suite.sh), which calls the same API; and the test
  # runner's warm interpreter (tests/unit/warm.sh, 48 s) on Debian 12 and
  # trixie: every PyTorch suite on sid runs its plain runs through it.  Of
  # split's cases sid also leaves out the first run without loader workers
  # (full-plain: the next has them), the accumulated passes (the adapter's
  # count), BatchNorm at np=4 (np=3 runs) and the statistics and
  # distillation script (the adapter's modes): about 2 minutes together.
  # Every Python process there starts torch 2.14 (about 4.5 s of CPU with
  # the compiler modules its optimizers import, twice Debian 12's 1.13), and
  # the suites keep both cores busy, so sid leaves to Debian 12 as well:
  # split's HVDSHIM_GRADIENTS=sum against the plain run (sum-exact; the
  # warnings, read from torch's graph, run), fidelity-data's replica guard
  # message (guard; its checks run in accumulate.sh and grow.sh), grow.sh's
  # stop at an epoch's last step and script without a DataLoader (GROW_SKIP),
  # Horovod's suite at np=3 and 1 (SUITE_NPS=2), orphans.sh's elastic
  # cases with workers by spawn and a rank > 0 killed beside a forkserver
  # (ORPHANS_SHORT), and sigint.sh's SIGINT to the launcher, Ctrl-C in
  # hvdrun's terminal and SIGTERM to hvdrun alone (SIGINT_SHORT; trixie's
  # prterun runs them): about 4 minutes of its 2 cores
  if [ "$suite" = sid ]; then
    env="SHARD_SHORT=1 ERRORS_SHORT=1 ORPHANS_SHORT=1 SIGINT_SHORT=1 SUITE_NPS=2 GROW_SKIP='epoch-end no-loader' SPLIT_SKIP='full-plain accumulate bn4 distill no-optimizer gan frozen noncontig late shared own-optimizer gradnoise free reinit iterable swa linprobe manualbn unused maxnorm full3 bn250 shardbn scriptedbn batchsized sum-exact' FIDELITY_SKIP='plateau early-shard samplers dealing guard' "
    tests=$(echo "$tests" | tr ' ' '\n' | grep -v -x -e 'tests/tools/hvdshim-ab\.sh' -e 'tests/horovod/recipes\.sh' -e 'tests/unit/warm\.sh' | tr '\n' ' ')
  fi
  say "$name: $(echo $tests | wc -w) test scripts, $jobs at a time"
  # each result line as it comes (a run ended from outside still shows how
  # far it got), the whole output in the log
  { run "${env}make -j$jobs check TESTS='$tests'" 2>&1; echo $? >"$cache/$name.check.rc"; } |
    tee "$cache/$name.check.log" | grep --line-buffered -a -E '^(PASS|FAIL|ERROR|XPASS|SKIP): ' | sed -u "s/^/  $name: /"
  rc=$(cat "$cache/$name.check.rc" 2>/dev/null || echo 1)
  # ended by its time: the tests the test driver had started each lead a
  # process group of their own, which timeout's signals do not reach; they
  # (and their jobs) are ended here, every process whose root is the chroot
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    real=$(cd "$root" && pwd -P)
    left=$(for p in /proc/[0-9]*; do [ "$(readlink "$p/root" 2>/dev/null)" = "$real" ] && echo "${p#/proc/}"; done)
    [ -n "$left" ] && kill -9 $left 2>/dev/null && echo "  $name: ended $(echo $left | wc -w) process(es) of its unfinished tests"
    rm -rf "$root"/tmp/hvdshim-test.* # (their folders: a test killed runs no EXIT trap)
  fi
  p=0 f=0 s=0
  for k in PASS FAIL ERROR XPASS SKIP; do
    n=$(sed -n "s/^# $k: *\([0-9]*\).*/\1/p" "$cache/$name.check.log" | tail -1)
    n=${n:-0}
    # (no summary where the run was ended: its result lines counted)
    grep -a -q "^# $k:" "$cache/$name.check.log" || n=$(grep -a -c "^$k: " "$cache/$name.check.log")
    case $k in PASS) p=$((p + n)) ;; SKIP) s=$((s + n)) ;; *) f=$((f + n)) ;; esac
  done
  for t in $(sed -n 's/^SKIP: //p' "$cache/$name.check.log"); do
    sed -n "s/^SKIP: /  $name: skipped $t: /p" "$root$dir/${t%.sh}.log" 2>/dev/null | head -1
  done
  if [ $rc -ne 0 ]; then
    if [ $rc = 124 ] || [ $rc = 137 ]; then
      # the tests that had begun and not ended, or not begun
      unfinished=$(for t in $tests; do grep -a -q -E "^(PASS|FAIL|ERROR|XPASS|SKIP): $t\$" "$cache/$name.check.log" || echo "$t"; done | tr '\n' ' ')
      echo "  $name: the suites ran past their time (HVDCHECK_STACKS_TIME ${limit} s, or HVDCHECK_DEADLINE) and were ended; not finished: $unfinished"
      f=$((f + 1))
    fi
    for l in $(sed -n 's/^\(FAIL\|ERROR\): \(.*\)$/\2/p' "$cache/$name.check.log"); do
      echo "---- $name: ${l%.sh}.log"
      # indented under the stack's name, so that check-all's summary keeps
      # them: the log's FAIL lines first (a launcher's abort text can fill
      # the tail), then its tail
      grep -a -E '(^|[]:] )FAIL' "$root$dir/${l%.sh}.log" 2>/dev/null | head -5 | sed 's/\x0/^@/g; s/^/  '"$name"': FAIL line: /'
      show 30 "$root$dir/${l%.sh}.log" | sed "s/^/  $name: | /"
    done
    [ $f -eq 0 ] && f=1 # make itself failed
  fi
  # its five slowest tests (tests/timed.sh's "test-seconds: N"): where CI's
  # time goes (of this run's list: a tree copied in may carry older logs)
  slowest=$(for t in $tests; do
    l="$root$dir/${t%.sh}.log"
    n=$(sed -n 's/^test-seconds: \([0-9]*\)$/\1/p' "$l" 2>/dev/null | tail -1)
    [ -n "$n" ] && echo "$n $t"
  done | sort -rn | head -5 | awk '{printf "%s%s %ss", (NR > 1 ? ", " : ""), $2, $1}')
  [ -n "$slowest" ] && echo "  $name: slowest tests: $slowest"
  pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
  say "$name ($versions): $p passed, $f failed, $s skipped" \
    "(chroot $((t1 - t0)) s, build and suites $(($(date +%s) - t1)) s)"
done
total
