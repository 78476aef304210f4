#!/bin/sh
# make check-all: the whole test suite, as the README's command two and CI
# run it: `make check` (unit, multi-rank, PyTorch), `make check-faults`
# (killed, stalled, interrupted ranks), `make fuzz` (every parser, libFuzzer)
# and `make check-sanitize` (ASan+UBSan, valgrind), then `make check-stacks`
# (the suites on Debian trixie and sid, in chroots).  Ends with one line
# "N passed, N failed, N skipped" and a non-zero status if anything failed.
# Usage: check-all.sh MAKE  (from the top build directory)
MAKE=${1:-make}
pass=0 fail=0 skip=0
tally_automake() { # LOG: the "# PASS: n" lines automake prints
  for k in PASS FAIL ERROR XPASS SKIP; do
    n=$(sed -n "s/^# $k: *\([0-9]*\).*/\1/p" "$1" | tail -1)
    n=${n:-0}
    case $k in PASS) pass=$((pass + n)) ;; SKIP) skip=$((skip + n)) ;; *) fail=$((fail + n)) ;; esac
  done
}
for part in check check-faults; do
  $MAKE $part >"check-all-$part.log" 2>&1
  rc=$?
  grep -E '^(PASS|FAIL|SKIP|ERROR|XPASS):' "check-all-$part.log"
  for t in $(sed -n 's/^SKIP: //p' "check-all-$part.log"); do # say why
    [ -f "${t%.sh}.log" ] && sed -n 's/^SKIP: /  skipped because: /p' "${t%.sh}.log" | head -1
  done
  before=$fail
  tally_automake "check-all-$part.log"
  if [ $rc -ne 0 ]; then
    for f in $(grep -l -E '^(FAIL|ERROR)' $(find tests -name '*.log') 2>/dev/null); do echo "---- $f"; tail -40 "$f"; done
    [ $fail -eq $before ] && fail=$((fail + 1)) # make itself failed
  fi
done
for part in fuzz check-sanitize; do
  $MAKE $part >"check-all-$part.log" 2>&1
  rc=$?
  grep -E '^(fuzz|check-sanitize): ' "check-all-$part.log"
  p=$(grep -c -E '^(fuzz|check-sanitize): .*(no crash|passed|clean)' "check-all-$part.log")
  s=$(grep -c -E '^(fuzz|check-sanitize): .*SKIPPED' "check-all-$part.log")
  f=$(grep -c -E '^(fuzz|check-sanitize): .*FAILED' "check-all-$part.log")
  [ $rc -ne 0 ] && [ "$f" -eq 0 ] && { tail -30 "check-all-$part.log"; f=1; }
  pass=$((pass + p)) skip=$((skip + s)) fail=$((fail + f))
done
# the current Debian stacks in chroots (HVDSHIM_CHECK_STACKS=0 leaves them out)
if [ "${HVDSHIM_CHECK_STACKS:-1}" != 0 ]; then
  $MAKE check-stacks >check-all-check-stacks.log 2>&1
  rc=$?
  grep -E '^(check-stacks: |  [a-z-]+: )|^---- ' check-all-check-stacks.log
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' check-all-check-stacks.log | tail -1)
  if [ -n "$line" ]; then
    set -- $line
    pass=$((pass + $1)) fail=$((fail + $3)) skip=$((skip + $5))
  else
    tail -30 check-all-check-stacks.log
    fail=$((fail + 1))
  fi
  [ $rc -ne 0 ] && [ -n "$line" ] && [ "$3" = 0 ] && fail=$((fail + 1))
else
  echo "check-stacks: SKIPPED (HVDSHIM_CHECK_STACKS=0)"
  skip=$((skip + 1))
fi
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
