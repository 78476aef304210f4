#!/bin/sh
# The C sources are layered base/ < collectives/ < hooks/ < shim/
# (docs/ARCHITECTURE.md "Layers"): a file may include, and an object may
# call, only its own folder and the folders below it.  Checked twice: every
# #include "..." of the sources, and every undefined symbol of the built
# objects against the folder that defines it.  Then, inside collectives/,
# no circle among the GPU path's objects (gpu_internal.h gives their
# one-way order): tests/objcycles.sh, which takes any list of objects or a
# folder (no_circle below).
. "$(dirname "$0")/../lib.sh"
command -v nm >/dev/null || skip "nm not found (binutils)"
level() { case $1 in base) echo 0 ;; collectives) echo 1 ;; hooks) echo 2 ;; shim) echo 3 ;; *) echo -1 ;; esac; }
bad=0
for dir in base collectives hooks shim; do
  mine=$(level $dir)
  for f in "$top_srcdir/$dir"/*.c "$top_srcdir/$dir"/*.h; do
    [ -f "$f" ] || continue
    for inc in $(sed -n 's/^#include "\(\.\.\/[a-z_]*\)\/.*/\1/p' "$f" | sed 's#\.\./##'); do
      [ "$(level "$inc")" -gt "$mine" ] && { echo "FAIL: ${f#$top_srcdir/} includes from $inc/, a layer above $dir/"; bad=1; }
    done
  done
done
# symbols: which folder defines each of the project's (hvd_*: the libc
# names that shim/ interposes are libc's for everyone else), then who uses them
objs=$(ls "$top_builddir"/base/.libs/*.o "$top_builddir"/collectives/.libs/*.o "$top_builddir"/hooks/.libs/*.o \
  "$top_builddir"/shim/.libs/*.o 2>/dev/null)
[ -n "$objs" ] || fail "no built objects under $top_builddir/*/.libs (build first)"
# one nm over every object for each list (-A: the file on each line; its
# folder is the one above .libs), then one awk over definitions and uses
# shellcheck disable=SC2086
{ nm -A --defined-only $objs; echo "--"; nm -A -u $objs; } | awk '
function level(d) { return d == "base" ? 0 : d == "collectives" ? 1 : d == "hooks" ? 2 : d == "shim" ? 3 : -1 }
$0 == "--" { uses = 1; next }
{
  c = index($0, ":"); k = split(substr($0, 1, c - 1), f, "/"); dir = f[k - 2]; obj = f[k]
  k = split(substr($0, c + 1), p, " "); sym = p[k]; type = p[k - 1]
  if (sym !~ /^hvd_/) next
  if (!uses) { if (type ~ /[TDBR]/ && !(sym in owner)) owner[sym] = dir; next }
  if (!(sym in owner)) next # defined outside these objects
  n++
  if (level(owner[sym]) > level(dir)) print "FAIL: " dir "/" obj " calls " sym ", defined in " owner[sym] "/"
}
END { print "checked", n + 0 }' >"$TMP/calls"
grep '^FAIL' "$TMP/calls" && bad=1
n=$(sed -n 's/^checked //p' "$TMP/calls")
[ $bad = 0 ] || fail "a lower layer uses a higher one"
pass "layers base < collectives < hooks < shim: no upward include, no upward call ($n calls between objects checked)"

# no_circle WHAT OBJ|DIR...: no two of these objects use each other's
# symbols in a circle (file level: A uses a symbol that B defines).
no_circle() {
  what=$1
  shift
  sh "$top_srcdir/tests/objcycles.sh" "$@" >"$TMP/circles" 2>&1
  case $? in
    0) pass "$what: $(cat "$TMP/circles")" ;;
    1) cat "$TMP/circles"; echo "FAIL: $what use each other in a circle"; circle=1 ;;
    *) cat "$TMP/circles"; echo "FAIL: $what: the circle check could not run"; circle=1 ;;
  esac
}
circle=0
# each folder's objects (between folders, the checks above keep calls
# downward; the libc names the shim interposes are libc's for the others)
for dir in base collectives hooks shim; do
  no_circle "$dir/" "$top_builddir/$dir"
done
[ $circle = 0 ] || fail "a circle among the objects of one layer"
# the served Python packages: no import circle either
pycircles=$("${PYTHON:-python3}" "$top_srcdir/tests/unit/pyimports.py" "$top_srcdir/python" horovod hvdshim_torch) ||
  fail "could not read the Python packages' imports"
[ -z "$pycircles" ] || fail "Python modules that import each other in a circle: $pycircles"
pass "the served Python packages (horovod, hvdshim_torch): no import circle"
