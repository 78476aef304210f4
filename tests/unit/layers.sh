#!/bin/sh
# The C sources are layered, each folder a level (docs/ARCHITECTURE.md
# "Layers"), from the ground up:
#   base/ < collectives/ (the public header) < collectives/transports/
#   < collectives/gpu/ < collectives/negotiation/ < collectives/observers/
#   < collectives/engine/ < hooks/ < shim/
# A file may include, and an object may call, only its own folder and the
# folders below it (a folder not listed takes its parent's level: a
# subfolder of hooks/ is hooks/).  Checked twice: every #include "..." with
# a path of the sources, and every undefined symbol of the built objects
# against the folder that defines it.  Then no circle among the objects of
# one folder: tests/objcycles.sh, which takes any list of objects or a
# folder (no_circle below); between folders the levels keep calls one way.
. "$(dirname "$0")/../lib.sh"
command -v nm >/dev/null || skip "nm not found (binutils)"
FOLDERS="base collectives collectives/transports collectives/gpu collectives/negotiation collectives/observers
  collectives/engine hooks shim"
# level FOLDER: its place in FOLDERS (0 = the ground), its parent's when it
# is not listed, -1 outside the library
level() {
  _d=$1
  while :; do
    _i=0
    for _f in $FOLDERS; do
      [ "$_f" = "$_d" ] && { echo $_i; return; }
      _i=$((_i + 1))
    done
    case $_d in */*) _d=${_d%/*} ;; *) echo -1; return ;; esac
  done
}
# every folder of the library's sources, listed or not (a subfolder of a
# listed one takes its level)
srcdirs=$(cd "$top_srcdir" && find base collectives hooks shim -type f \( -name '*.c' -o -name '*.h' \) |
  sed 's#/[^/]*$##' | sort -u)
bad=0
for dir in $srcdirs; do
  mine=$(level $dir)
  for f in "$top_srcdir/$dir"/*.c "$top_srcdir/$dir"/*.h; do
    [ -f "$f" ] || continue
    for inc in $(sed -n 's/^#include "\(\.\.\/[^"]*\)\/[^/"]*".*/\1/p' "$f"); do
      to=$(cd "$top_srcdir/$dir/$inc" 2>/dev/null && pwd) || { echo "FAIL: ${f#$top_srcdir/} includes from $inc/, not a folder"; bad=1; continue; }
      to=${to#$(cd "$top_srcdir" && pwd)/}
      [ "$(level "$to")" -gt "$mine" ] && { echo "FAIL: ${f#$top_srcdir/} includes from $to/, a layer above $dir/"; bad=1; }
    done
  done
done
# symbols: which folder defines each of the project's (hvd_*: the libc
# names that shim/ interposes are libc's for everyone else), then who uses them
objdirs=$(cd "$top_builddir" && find base collectives hooks shim -path '*/.libs/*.o' 2>/dev/null | sed 's#/\.libs/[^/]*$##' | sort -u)
objs=
# (an object whose source is gone, left by a build before a file moved, is
# not part of the library: skipped)
for dir in $objdirs; do
  for o in "$top_builddir/$dir"/.libs/*.o; do
    b=${o##*/}; b=${b%.o}; b=${b#*_la-}
    { [ -f "$top_srcdir/$dir/$b.c" ] || [ -f "$top_builddir/$dir/$b.c" ]; } && objs="$objs $o"
  done
done
[ -n "$(echo $objs)" ] || fail "no built objects under $top_builddir/*/.libs (build first)"
# one nm over every object for each list (-A: the file on each line; its
# folder is the one above .libs), then one awk over definitions and uses
# shellcheck disable=SC2086
{ nm -A --defined-only $objs; echo "--"; nm -A -u $objs; } | awk -v top="$top_builddir/" -v folders="$FOLDERS" '
BEGIN { n = split(folders, f, /[ \n]+/); for (i = 1; i <= n; i++) if (f[i] != "") lv[f[i]] = i }
function level(d) { while (!(d in lv)) { if (d !~ /\//) return -1; sub(/\/[^\/]*$/, "", d) } return lv[d] }
$0 == "--" { uses = 1; next }
{
  c = index($0, ":"); path = substr($0, 1, c - 1)
  if (index(path, top) == 1) path = substr(path, length(top) + 1)
  obj = path; sub(/.*\//, "", obj); dir = path; sub(/\/\.libs\/[^\/]*$/, "", dir)
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
pass "layers $(echo $FOLDERS | sed 's/ / < /g'): no upward include, no upward call ($n calls between objects checked)"

# The library exports interposers of libc's file calls (the rank-private
# overlay: its block of shim/hvdshim.map); its own code makes those calls
# through base/libc.c (the real libc, resolved past the library), so no
# object but the overlay's own names one of them.
interposed=$(awk '/overlay/ && /\/\*/ { on = 1; next } on && (/\/\*/ || /local:/) { on = 0 } on' "$top_srcdir/shim/hvdshim.map" |
  tr -d ' \n' | tr ';' '\n' | grep .)
[ -n "$interposed" ] || fail "no overlay block found in shim/hvdshim.map"
# shellcheck disable=SC2086
direct=$(nm -A -u $objs | awk -v top="$top_builddir/" -v names="$interposed" '
BEGIN { n = split(names, a, "\n"); for (i = 1; i <= n; i++) libc[a[i]] = 1 }
{
  c = index($0, ":"); o = substr($0, 1, c - 1); sym = $NF; sub(/@.*/, "", sym)
  if (o ~ /overlay[^\/]*$/ || !(sym in libc)) next
  if (index(o, top) == 1) o = substr(o, length(top) + 1)
  printf " %s: %s;", o, sym
}')
[ -z "$direct" ] || fail "the library's own code calls libc names the overlay interposes (call them through hvd_libc(), base/libc.h):$direct"
pass "no object but the overlay's calls one of the $(echo "$interposed" | wc -l) libc names it interposes (the library's own file calls go through base/libc.c)"

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
for dir in $objdirs; do
  no_circle "$dir/" "$top_builddir/$dir"
done
[ $circle = 0 ] || fail "a circle among the objects of one layer"
# the served Python packages: no import circle either
pycircles=$("${PYTHON:-python3}" "$top_srcdir/tests/unit/pyimports.py" "$top_srcdir/hooks/python" horovod hvdshim_torch) ||
  fail "could not read the Python packages' imports"
[ -z "$pycircles" ] || fail "Python modules that import each other in a circle: $pycircles"
pass "the served Python packages (horovod, hvdshim_torch): no import circle"
