#!/bin/sh
# make check-all: the whole test suite, as the README's command two and CI
# run it: `make check` (unit, multi-rank, PyTorch), `make check-faults`
# (killed, stalled, interrupted ranks), `make fuzz` (every parser, libFuzzer)
# and `make check-sanitize` (ASan+UBSan, valgrind), then `make check-stacks`
# (the suites on Debian trixie and sid, in chroots).  Ends with one line,
# the totals and each part's passed/failed/skipped,
#   N passed, N failed, N skipped (check P/F/S, check-faults P/F/S, fuzz P/F/S, check-sanitize P/F/S, check-stacks P/F/S)
# and a non-zero status if anything failed.  Logs are read as text whatever bytes they hold (grep -a: a test's
# output may hold a NUL byte) and shown with NUL bytes as ^@.
# Usage: check-all.sh MAKE SRCDIR  (from the top build directory)
MAKE=${1:-make}
SRCDIR=${2:-.}
pass=0 fail=0 skip=0 parts="" times=""
t_part=$(date +%s) # when the current part began
p=0 f=0 s=0 # the current part's
show() { tail -n "$1" "$2" 2>/dev/null | sed 's/\x0/^@/g'; } # show N FILE: its last N lines
# part NAME: add the current part's counts to the totals and the breakdown
part() {
  pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
  parts="$parts${parts:+, }$1 $p/$f/$s"
  times="$times${times:+, }$1 $(($(date +%s) - t_part)) s"
  echo "check-all: $1 done in $(($(date +%s) - t_part)) s ($p/$f/$s)"
  t_part=$(date +%s)
}
tally_automake() { # LOG: the "# PASS: n" lines automake prints
  p=0 f=0 s=0
  for k in PASS FAIL ERROR XPASS SKIP; do
    n=$(sed -n "s/^# $k: *\([0-9]*\).*/\1/p" "$1" | tail -1)
    n=${n:-0}
    case $k in PASS) p=$((p + n)) ;; SKIP) s=$((s + n)) ;; *) f=$((f + n)) ;; esac
  done
}
# the stacks' chroots are built (downloaded, unpacked) at the lowest
# priority while the host's suites run, not after them: about 5 minutes of CI
if [ "${HVDCHECK_RUN_STACKS:-1}" != 0 ]; then
  nice -n 19 sh "$SRCDIR/tests/stacks/check-stacks.sh" --prepare "$SRCDIR" . >check-all-prepare.log 2>&1 &
fi
# make check runs HVDCHECK_JOBS test scripts at once (default: the
# cores): a script leaves a core idle a third of its time (a single
# process's phases, launches, waits), so two at a time on 2 cores took
# Debian 12's suites from about 13 minutes to 7; the fault suite (killed,
# stalled, interrupted ranks, timed from outside) too, as the stacks run it
# beside the rest (255 s one at a time, 201 two)
jobs=${HVDCHECK_JOBS:-$(nproc 2>/dev/null || echo 1)}
for name in check check-faults; do
  $MAKE -j"$jobs" $name >"check-all-$name.log" 2>&1
  rc=$?
  grep -a -E '^(PASS|FAIL|SKIP|ERROR|XPASS):' "check-all-$name.log"
  for t in $(sed -n 's/^SKIP: //p' "check-all-$name.log"); do # say why
    [ -f "${t%.sh}.log" ] && sed -n 's/^SKIP: /  skipped because: /p' "${t%.sh}.log" | head -1
  done
  tally_automake "check-all-$name.log"
  if [ $rc -ne 0 ]; then
    # each failed log: its FAIL lines first (a launcher's abort text can fill the tail), then its tail
    for l in $(grep -a -l -E '^(FAIL|ERROR)' $(find tests -name '*.log') 2>/dev/null); do
      echo "---- $l"
      grep -a -E '(^|[]:] )FAIL' "$l" | head -5 | sed 's/\x0/^@/g; s/^/FAIL line: /'
      show 40 "$l"
    done
    [ $f -eq 0 ] && f=1 # make itself failed
  fi
  part $name
done
for name in fuzz check-sanitize; do
  $MAKE $name >"check-all-$name.log" 2>&1
  rc=$?
  grep -a -E '^(fuzz|check-sanitize): ' "check-all-$name.log"
  p=$(grep -a -c -E '^(fuzz|check-sanitize): .*(no crash|passed|clean)' "check-all-$name.log")
  s=$(grep -a -c -E '^(fuzz|check-sanitize): .*SKIPPED' "check-all-$name.log")
  f=$(grep -a -c -E '^(fuzz|check-sanitize): .*FAILED' "check-all-$name.log")
  [ $rc -ne 0 ] && [ "$f" -eq 0 ] && { show 30 "check-all-$name.log"; f=1; }
  part $name
done
# make distcheck: the tarball builds outside its tree (VPATH, the sources
# read-only), installs and uninstalls, and passes a subset of make check
# there (the whole of it ran above, in this tree): the unit tests, the
# install and manual-page checks.  (The tarball's Python packages and
# examples run as a user installs them in check-stacks' package stack:
# make dist's tarball built into Debian packages, installed, the bundled
# example trained under hvdrun; a multi-rank PyTorch test here, 40 s of CI,
# ran the same files a second time.)
DISTCHECK_TESTS="tests/unit/unit_tests tests/unit/overlay_view tests/unit/settings-page.sh tests/unit/install.sh tests/tools/man.sh"
t0=$(date +%s)
$MAKE -j"$jobs" distcheck TESTS="$DISTCHECK_TESTS" >check-all-distcheck.log 2>&1
rc=$?
p=0 f=0 s=0
if [ $rc = 0 ] && grep -a -q 'archives ready for distribution' check-all-distcheck.log; then
  p=1
  echo "distcheck: passed ($(echo $DISTCHECK_TESTS | wc -w) test scripts in the tarball's VPATH build, $(($(date +%s) - t0)) s)"
else
  f=1
  grep -a -E '^(FAIL|ERROR):' check-all-distcheck.log
  show 30 check-all-distcheck.log
  echo "distcheck: FAILED"
fi
part distcheck
# the current Debian stacks in chroots (HVDCHECK_RUN_STACKS=0 leaves them out):
# each stack's lines, then its total "check-stacks: all stacks: N passed, ..."
if [ "${HVDCHECK_RUN_STACKS:-1}" != 0 ]; then
  grep -a '^check-stacks: .*\(ready in\|FAILED\)' check-all-prepare.log 2>/dev/null | sed 's/^check-stacks: /check-stacks: prepared: /'
  # its lines as they come (a run ended from outside still shows how far
  # the stacks got), the whole output in the log
  { $MAKE check-stacks 2>&1; echo $? >check-all-check-stacks.rc; } | tee check-all-check-stacks.log |
    grep --line-buffered -a -E '^check-stacks: |^  [a-z-]+: |^---- ' |
    grep --line-buffered -a -v '^check-stacks: all stacks: ' | sed -u 's/\x0/^@/g'
  rc=$(cat check-all-check-stacks.rc 2>/dev/null || echo 1)
  line=$(sed -n 's/^check-stacks: all stacks: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' \
    check-all-check-stacks.log | tail -1)
  p=0 f=1 s=0
  if [ -n "$line" ]; then
    set -- $line
    p=$1 f=$2 s=$3
    [ $rc -ne 0 ] && [ "$f" = 0 ] && f=1 # make itself failed
  else
    show 30 check-all-check-stacks.log
  fi
  part check-stacks
else
  echo "check-stacks: SKIPPED (HVDCHECK_RUN_STACKS=0)"
  p=0 f=0 s=1
  part check-stacks
fi
# the ten slowest test scripts of check and check-faults (tests/timed.sh
# writes "test-seconds: N" in each log): where CI's time goes
slowest=$(for l in $(find tests -name '*.log' ! -name test-suite.log); do
  n=$(sed -n 's/^test-seconds: \([0-9]*\)$/\1/p' "$l" | tail -1)
  [ -n "$n" ] && echo "$n ${l%.log}.sh"
done | sort -rn | head -10 | awk '{printf "%s%s %ss", (NR > 1 ? ", " : ""), $2, $1}')
[ -n "$slowest" ] && echo "slowest tests: $slowest"
# where the run's time went: each part, and each stack's own (its line's "(N s)")
stack_times=$(sed -n 's/^check-stacks: \([a-z-]*\) .*[(, ]\([0-9]*\) s)$/\1 \2 s/p' check-all-check-stacks.log 2>/dev/null | paste -sd, - | sed 's/,/, /g')
echo "part times: $times${stack_times:+ (stacks: $stack_times)}"
echo "$pass passed, $fail failed, $skip skipped ($parts)"
[ $fail -eq 0 ]
