# Sourced by tests/native/*.sh after tests/lib.sh: build the native example
# (examples/native) and its variants with configure's compiler, run it plain
# and under the shim, compare final parameters.
EX="$top_srcdir/examples/native"
CC=${CC:-cc}
command -v "${CC%% *}" >/dev/null 2>&1 || skip "no C compiler ($CC) to build the native example"
"$top_builddir/tools/hvdshim-info" | grep -q "libffi yes" || skip "hvdshim was built without libffi (apt-get install libffi-dev, then rebuild): no native hooks"
TOL=1e-5 # largest difference of a parameter between a distributed run and its single-process reference
BIN="$TMP/bin"
mkdir -p "$BIN"

# build_lib DIR: libmlp.so in DIR
build_lib() {
  mkdir -p "$1"
  $CC -O2 -g -fPIC -shared -o "$1/libmlp.so" "$EX/mlp.c" -lm || fail "cannot build libmlp.so"
}
# build_train DIR NAME CFLAGS/LDFLAGS...: the trainer linked against DIR/libmlp.so
build_train() {
  _d=$1 _n=$2
  shift 2
  $CC -O2 -g "$@" -I"$EX" -o "$_d/$_n" "$EX/train.c" -L"$_d" -lmlp -Wl,-rpath,"$_d" -lm || fail "cannot build $_n ($*)"
}
# fcmp A B: largest absolute difference of two raw float32 files; status 0
# when within $TOL
$CC -O2 -o "$BIN/fcmp" -x c - -lm <<'C' || fail "cannot build fcmp"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  FILE *a = fopen(argv[1], "rb"), *b = fopen(argv[2], "rb");
  if (!a || !b) { fprintf(stderr, "fcmp: cannot open %s\n", a ? argv[2] : argv[1]); return 2; }
  double tol = atof(argv[3]), worst = 0;
  long n = 0;
  float x, y;
  for (;; n++) {
    size_t ra = fread(&x, 4, 1, a), rb = fread(&y, 4, 1, b);
    if (ra != rb) { fprintf(stderr, "fcmp: %s and %s differ in length\n", argv[1], argv[2]); return 2; }
    if (!ra) break;
    double d = fabs((double)x - y);
    if (!(d <= worst)) worst = d; /* NaN counts as the worst */
  }
  printf("%ld parameters, largest difference %.3g (tolerance %g)\n", n, worst, tol);
  return n > 0 && worst <= tol ? 0 : 1;
}
C
# same A B: the two parameter files agree within $TOL
same() { "$BIN/fcmp" "$1" "$2" "$TOL"; }
# differ A B: they do not (a check that a comparison can fail)
differ() { ! "$BIN/fcmp" "$1" "$2" "$TOL" >/dev/null; }
# native NP SPEC PROGRAM ARGS...: under mpirun with the shim and SPEC
native() {
  _np=$1 _spec=$2
  shift 2
  HVDSHIM_HOOKS=$_spec shim "$_np" "$@"
}
