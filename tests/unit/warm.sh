#!/bin/sh
# The tests' plain runs from a warm interpreter (tests/lib.sh's py,
# tests/warm.py) behave as `python ...` in a fresh process: the arguments,
# __name__ and __file__, the environment of the call, stdout and stderr apart,
# the exit status (sys.exit with a number or a message, an exception's
# traceback without the runner's frames), atexit, threads waited for, a file
# left open flushed, numpy's unseeded draws new each run, TMPDIR followed,
# the same weights and output as a direct run of train.py (with forked
# DataLoader workers too), the bound T; a variable read at start-up that
# differs runs directly.
. "$(dirname "$0")/../lib.sh"
need_torch
warm_start
[ -n "${WARM-}" ] || fail "warm_start did not start"
# served warm: torch is there before the run imports it
[ "$(py -c 'import sys; print("torch" in sys.modules)')" = True ] || { cat "$WARM/log"; fail "the run was not forked from the warm interpreter"; }

out=$(MYVAR=seen py -c 'import os, sys; print(sys.argv, __name__, os.environ["MYVAR"], sys.path[0] == ""); print("to stderr", file=sys.stderr); sys.exit(3)' a 'b c' 2>"$TMP/err")
rc=$?
[ $rc = 3 ] && [ "$out" = "['-c', 'a', 'b c'] __main__ seen True" ] && [ "$(cat "$TMP/err")" = "to stderr" ] ||
  fail "-c: rc $rc, stdout '$out', stderr '$(cat "$TMP/err")'"
printf 'import os, sys\nprint(__file__, __name__, sys.argv[1:], sys.path[0] == os.path.dirname(os.path.abspath(__file__)))\n' >"$TMP/s.py"
out=$(py "$TMP/s.py" x)
[ "$out" = "$TMP/s.py __main__ ['x'] True" ] || fail "a script: '$out'"
pass "arguments, __name__, __file__, sys.path[0], the call's environment, stdout and stderr, sys.exit(3)"

py -c 'import sys; sys.exit("a message")' 2>"$TMP/err"
rc=$?
[ $rc = 1 ] && [ "$(cat "$TMP/err")" = "a message" ] || fail "sys.exit(message): rc $rc, '$(cat "$TMP/err")'"
py -c 'raise ValueError("boom")' 2>"$TMP/err"
rc=$?
[ $rc = 1 ] && grep -q '^ValueError: boom$' "$TMP/err" && grep -q 'File "<string>", line 1' "$TMP/err" &&
  ! grep -q warm.py "$TMP/err" || { cat "$TMP/err"; fail "an exception: rc $rc"; }
py -c 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)'
rc=$?
[ $rc = 143 ] || fail "killed by SIGTERM: rc $rc, expected 143"
pass "sys.exit(message): 1 and the message; an exception: 1 and its traceback without the runner's frames; a signal: 128+N"

out=$(py -c '
import atexit, threading, time
f = open("'"$TMP"'/left-open", "w")
f.write("unclosed")
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()')
[ "$out" = "thread done
atexit ran" ] && [ "$(cat "$TMP/left-open")" = unclosed ] ||
  fail "at exit: '$out', the file left open holds '$(cat "$TMP/left-open" 2>/dev/null)'"
pass "at exit: a thread waited for, then atexit, and a file left open flushed"

draw='import numpy; print(numpy.random.rand())'
[ "$(py -c "$draw")" != "$(py -c "$draw")" ] || fail "numpy's unseeded draws are the same in two runs"
mkdir -p "$TMP/td"
[ "$(TMPDIR="$TMP/td" py -c 'import tempfile; print(tempfile.gettempdir())')" = "$TMP/td" ] || fail "TMPDIR not followed"
pass "numpy's unseeded state new in each run; TMPDIR followed"

# a variable read at start-up (OMP_NUM_THREADS) that differs: run directly
[ "$(OMP_NUM_THREADS=2 py -c 'import sys; print("torch" in sys.modules)')" = False ] || fail "OMP_NUM_THREADS=2 was not run directly"
grep -q "run directly: OMP_NUM_THREADS differs" "$WARM/log" || { cat "$WARM/log"; fail "the fallback not logged"; }
start=$(date +%s)
T=2 py -c 'import time; time.sleep(30)'
rc=$?
[ $rc = 124 ] && [ $(($(date +%s) - start)) -lt 10 ] || fail "T=2: rc $rc after $(($(date +%s) - start)) s"
pass "OMP_NUM_THREADS changed: run directly; T=2 ends a run at 2 s with 124"

# (stdout and stderr compared each on its own: the warm run's reach the
# caller through two pipes, so where both are one file their lines
# interleave as the two copies are scheduled)
for w in 0 2; do
  py "$TRAIN" --case full --workers $w --out "$TMP/warm.pt" >"$TMP/warm.out" 2>"$TMP/warm.err" ||
    { cat "$TMP/warm.out" "$TMP/warm.err"; fail "warm train.py --workers $w"; }
  "$PYTHON" "$TRAIN" --case full --workers $w --out "$TMP/direct.pt" >"$TMP/direct.out" 2>"$TMP/direct.err" || fail "direct train.py"
  same "$TMP/warm.pt" "$TMP/direct.pt" 0 >"$TMP/cmp" && cmp -s "$TMP/warm.out" "$TMP/direct.out" &&
    cmp -s "$TMP/warm.err" "$TMP/direct.err" ||
    { cat "$TMP/cmp"; diff "$TMP/warm.out" "$TMP/direct.out"; diff "$TMP/warm.err" "$TMP/direct.err"
      fail "train.py --workers $w: warm and direct differ"; }
done
pass "train.py, and with 2 DataLoader workers: the weights and the output of a direct run"
