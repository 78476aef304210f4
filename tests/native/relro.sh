#!/bin/sh
# The same hooks in differently linked trainers: no RELRO and no PIE (lazy
# PLT slots in writable memory), PIE with partial RELRO (the default), full
# RELRO (every slot read-only after start: patched through mprotect), and
# -fno-plt (calls through GLOB_DAT slots in the RELRO .got).  readelf checks
# that each build really is what it claims, then each runs at np=2 against
# the plain run with a 2x batch.  Last, a library with versioned symbols.
. "$(dirname "$0")/../lib.sh"
need_mpirun
. "$(dirname "$0")/native-lib.sh"
command -v readelf >/dev/null || skip "readelf not found (apt-get install binutils)"
build_lib "$BIN"
build_train "$BIN" train-norelro -fno-PIE -no-pie -Wl,-z,norelro -Wl,-z,lazy
build_train "$BIN" train-pie -fPIE -pie -Wl,-z,relro -Wl,-z,lazy
build_train "$BIN" train-fullrelro -fPIE -pie -Wl,-z,relro,-z,now
build_train "$BIN" train-noplt -fPIE -pie -fno-plt -Wl,-z,relro -Wl,-z,lazy

# has PROGRAM WHAT: readelf says PROGRAM is built as WHAT
has() {
  case $2 in
  exec) readelf -h "$1" | grep -q 'Type:.*EXEC' ;;
  pie) readelf -h "$1" | grep -q 'Type:.*DYN' ;;
  relro) readelf -lW "$1" | grep -q GNU_RELRO ;;
  now) readelf -dW "$1" | grep -Eq 'BIND_NOW|FLAGS.*NOW' ;;
  plt) readelf -rW "$1" | grep -q 'JUMP_SLOT.*sgd_update' ;;
  glob_dat) readelf -rW "$1" | grep -q 'GLOB_DAT.*sgd_update' ;;
  esac
}
check() { has "$1" "$2" || { readelf -hldrW "$1" | head -80; fail "$(basename "$1") is not built with $2"; }; }
checknot() { ! has "$1" "$2" || fail "$(basename "$1") unexpectedly has $2"; }
check "$BIN/train-norelro" exec; checknot "$BIN/train-norelro" relro; checknot "$BIN/train-norelro" now
check "$BIN/train-norelro" plt
check "$BIN/train-pie" pie; check "$BIN/train-pie" relro; checknot "$BIN/train-pie" now; check "$BIN/train-pie" plt
check "$BIN/train-fullrelro" pie; check "$BIN/train-fullrelro" relro; check "$BIN/train-fullrelro" now
check "$BIN/train-noplt" glob_dat; checknot "$BIN/train-noplt" plt

SPEC="$EX/mlp.hooks"
"$BIN/train-pie" --steps 150 --batch 32 --out "$TMP/ref.bin" >/dev/null || fail "plain run"
for v in norelro pie fullrelro noplt; do
  HVDSHIM_LOG_LEVEL=debug native 2 "$SPEC" "$BIN/train-$v" --steps 150 --batch 16 --out "$TMP/$v.bin" \
    >"$TMP/$v.log" 2>&1 || { cat "$TMP/$v.log"; fail "train-$v under the shim"; }
  kind=PLT ro=
  [ $v = noplt ] && kind=GOT
  [ $v = noplt ] || [ $v = fullrelro ] && ro=" (read-only RELRO page)"
  grep -qF "hook sgd_update: patched a $kind slot in the executable$ro" "$TMP/$v.log" ||
    { cat "$TMP/$v.log"; fail "train-$v: no '$kind slot$ro' patch reported"; }
  same "$TMP/ref.bin" "$TMP/$v.bin" || fail "train-$v differs from the plain run"
  pass "train-$v ($kind slots) matches the plain run with a 2x batch"
done

# Versioned symbols: libmlp with a version node, so the trainer's references
# are sgd_update@MLP_1.0.  name@MLP_1.0 is hooked; name@MLP_2.0 is not (a
# warning names it, and the ranks train apart).
V="$BIN/versioned"
mkdir -p "$V"
printf 'MLP_1.0 { global: *; };\n' >"$V/mlp.map"
$CC -O2 -g -fPIC -shared -Wl,--version-script="$V/mlp.map" -o "$V/libmlp.so" "$EX/mlp.c" -lm || fail "versioned libmlp"
build_train "$V" train
readelf -rW "$V/train" | grep -q 'sgd_update@MLP_1.0' || fail "the trainer's reference is not versioned"
sed 's/^void sgd_update(/void sgd_update@MLP_1.0(/' "$SPEC" >"$TMP/v1.hooks"
sed 's/^void sgd_update(/void sgd_update@MLP_2.0(/' "$SPEC" >"$TMP/v2.hooks"
grep -q 'sgd_update@MLP_1.0(' "$TMP/v1.hooks" || fail "sed did not version the spec"
native 2 "$TMP/v1.hooks" "$V/train" --steps 150 --batch 16 --out "$TMP/v1.bin" >"$TMP/v1.log" 2>&1 ||
  { cat "$TMP/v1.log"; fail "versioned hook"; }
same "$TMP/ref.bin" "$TMP/v1.bin" || fail "sgd_update@MLP_1.0 differs from the plain run"
native 2 "$TMP/v2.hooks" "$V/train" --steps 150 --batch 16 --out "$TMP/v2.bin" >"$TMP/v2.log" 2>&1 ||
  { cat "$TMP/v2.log"; fail "hook with another version"; }
grep -q "hook sgd_update: not found in any loaded object" "$TMP/v2.log" || { cat "$TMP/v2.log"; fail "no warning for @MLP_2.0"; }
differ "$TMP/ref.bin" "$TMP/v2.bin" || fail "sgd_update@MLP_2.0 was hooked anyway"
pass "versioned symbols: @MLP_1.0 hooked and matches the plain run; @MLP_2.0 left alone with a warning"
