#!/bin/sh
# Hook spec errors: each bad spec gets one line naming file:line:col, what
# was found and what was expected (hvdshim-info --check-hooks, the same
# parser the shim uses).  Under mpirun: a bad spec ends every rank with a
# non-zero status and that line, without a hang; a symbol that no loaded
# object calls gets a warning and the job runs; a count that goes negative at
# run time ends the job with the hook's name.
. "$(dirname "$0")/../lib.sh"
need_mpirun
. "$(dirname "$0")/native-lib.sh"
INFO="$top_builddir/tools/hvdshim-info"
n=0
# bad SPEC-TEXT EXPECTED-MESSAGE: the spec (as a file) is refused with that message
bad() {
  n=$((n + 1))
  printf '%b' "$1" >"$TMP/bad$n.hooks"
  if "$INFO" --check-hooks "$TMP/bad$n.hooks" >"$TMP/bad$n.out" 2>&1; then
    fail "spec $n accepted: $1"
  fi
  grep -qF -- "$2" "$TMP/bad$n.out" || { cat "$TMP/bad$n.out"; fail "spec $n: expected '$2'"; }
  [ "$(wc -l <"$TMP/bad$n.out")" = 1 ] || { cat "$TMP/bad$n.out"; fail "spec $n: more than one line"; }
}
P="void sgd_update(float *w, const float *g, long n, float lr)\n"
bad "$P  g: allreduce count=n\nvoid load(long i, flaot *x)\n  i: shard stride\n" \
  "bad1.hooks:3:19: unknown type 'flaot' (did you mean 'float'?)"
bad "$P  \$5: allreduce count=n\n" "bad2.hooks:2:3: argument \$5 out of range: 'sgd_update' has 4 arguments"
bad "$P  g: allreduce op=avg\n" "bad3.hooks:2:6: allreduce of 'g' needs count=EXPR"
bad "$P  g: allreduce count=n dtype=complex64\n" "bad4.hooks:2:30: unknown dtype 'complex64' (expected float32"
bad "$P  g: allreduce cout=n\n" "unknown option 'cout' for allreduce (did you mean 'count'?)"
bad "$P  g: allreduce count=m\n" "'sgd_update' has no argument 'm'"
bad "$P  lr: allreduce count=1\n" "allreduce needs a buffer, but 'lr' is 'float' (not a pointer)"
bad "$P  g: allreduce count=lr\n" "'lr' is 'float'; an expression uses integer arguments"
bad "$P  g: allreduce count=n dtype=float64\n" "dtype=float64 does not match 'g', a 'const float *' (float32 elements)"
bad "void f(void *buf, long n)\n  buf: allreduce count=n\n" "allreduce of 'buf' needs dtype="
bad "int printf(const char *fmt, ...)\n  fmt: shard stride\n" "variadic functions ('...') can't be hooked"
bad "void f(struct params p, long i)\n  i: shard stride\n" "'struct params' passed by value is not supported"
bad "void f(long i)\n  i: shard\n" "shard of 'i' needs a mode"
bad "$P" "'sgd_update' has no actions"
bad "g: allreduce count=n\n" "bad15.hooks:1:1: action 'g' before any prototype"
bad "$P  g: allreduce count=(n+1\n" "expected ')', found end of line"
bad "$P  g: allreduce count=n\n$P  w: broadcast count=n\n" "'sgd_update' is hooked twice"
"$INFO" --check-hooks "$TMP/missing.hooks" 2>&1 | grep -qF "cannot read the hook spec '$TMP/missing.hooks': No such file or directory" ||
  fail "a missing spec file is not named"
pass "$n malformed specs and a missing file each refused with their line"

# The inline form points at HVDSHIM_HOOKS:line:col.
"$INFO" --check-hooks 'void f(float *g, long n); g: allreduce count=nn' 2>&1 |
  grep -qF "HVDSHIM_HOOKS:1:46: 'f' has no argument 'nn' (did you mean 'n'?)" || fail "inline spec error position"
# A good spec is described back.
"$INFO" --check-hooks "$EX/mlp.hooks" >"$TMP/good.out" || { cat "$TMP/good.out"; fail "examples/native/mlp.hooks refused"; }
grep -qF "allreduce 'grad' (float32 x n, avg) before each call" "$TMP/good.out" || { cat "$TMP/good.out"; fail "describe"; }
pass "inline spec errors point at HVDSHIM_HOOKS:line:col; a good spec is described"

build_lib "$BIN"
build_train "$BIN" train
# A bad spec in a job: every rank exits non-zero with the line, no hang.
T=60 native 2 "$TMP/bad1.hooks" "$BIN/train" --steps 5 >"$TMP/job-bad.log" 2>&1 && fail "a job with a bad spec succeeded"
ranks_said "$TMP/job-bad.log" "bad1.hooks:3:19: unknown type 'flaot'" 2 ||
  { cat "$TMP/job-bad.log"; fail "expected the spec error"; }
pass "a bad spec ends both ranks with its message"

# An unknown symbol: a warning (once per host), and the job runs.
printf '%b' "$P  g: allreduce count=n\nvoid no_such_function(float *x, int n)\n  x: allreduce count=n\n" >"$TMP/unknown.hooks"
native 2 "$TMP/unknown.hooks" "$BIN/train" --steps 20 --batch 8 --out "$TMP/u.bin" >"$TMP/unknown.log" 2>&1 ||
  { cat "$TMP/unknown.log"; fail "a spec with an unknown symbol must still run"; }
[ "$(grep -c "hook no_such_function: not found in any loaded object" "$TMP/unknown.log")" = 1 ] ||
  { cat "$TMP/unknown.log"; fail "expected one warning about no_such_function"; }
pass "a symbol no loaded object has is one warning; the job runs"

# A function of the executable, not exported, or exported (-rdynamic) but
# never called through a GOT/PLT slot: each warning says why it can't work.
printf '%b' "int main(int argc, char **argv)\n  argc: shard stride\n" >"$TMP/main.hooks"
native 1 "$TMP/main.hooks" "$BIN/train" --steps 1 >"$TMP/main.log" 2>&1 || { cat "$TMP/main.log"; fail "hooking main"; }
grep -q "HVDSHIM_HOOKS: train calls none of the spec's 1 function(s) through a GOT/PLT slot; fine if it is a wrapper .*otherwise: hook main: not found in any loaded object: .*a function the executable defines and calls itself (such calls don't go through the GOT and can't be hooked" "$TMP/main.log" ||
  { cat "$TMP/main.log"; fail "no warning for a function of the executable"; }
build_train "$BIN" train-rdynamic -rdynamic
native 1 "$TMP/main.hooks" "$BIN/train-rdynamic" --steps 1 >"$TMP/main2.log" 2>&1 || { cat "$TMP/main2.log"; fail "hooking main (-rdynamic)"; }
grep -q "otherwise: hook main: defined in .*train-rdynamic, but no loaded object calls it through a GOT/PLT entry" "$TMP/main2.log" ||
  { cat "$TMP/main2.log"; fail "no warning for an exported function only called inside its own object"; }
pass "functions only called inside the executable get the can't-be-hooked warning (exported or not)"

# A count that is negative at run time ends the job, naming the hook.
printf '%b' "$P  g: allreduce count=n-1000\n" >"$TMP/neg.hooks"
T=60 native 2 "$TMP/neg.hooks" "$BIN/train" --steps 5 >"$TMP/neg.log" 2>&1 && fail "a negative count did not fail"
grep -q "hook sgd_update: allreduce of 'g': count=n-1000 is -423 (negative)" "$TMP/neg.log" ||
  { cat "$TMP/neg.log"; fail "no message for the negative count"; }
pass "a negative count at run time ends the job with the hook's name"
