#!/bin/sh
# Circles among object files, from their symbols: objcycles.sh [-v] OBJ|DIR...
# An edge A -> B means A.o uses (nm -u) a symbol that B.o defines (nm
# --defined-only: global text, data, bss, rodata, common, weak).  A DIR
# stands for its libtool objects (DIR/.libs/*.o), else its *.o.  Each circle
# is printed as the files of one strongly connected component, followed by
# the edges inside it with their symbols.  Exit status: 0 no circle, 1 a
# circle, 2 a usage error.  -v also prints every edge.
# Used by tests/unit/layers.sh; runs on its own too, e.g.
#   tests/objcycles.sh -v collectives/.libs/libhvdcore_la-gpu*.o
set -u
verbose=0
[ "${1:-}" = -v ] && { verbose=1; shift; }
[ $# -gt 0 ] || { echo "usage: $0 [-v] OBJ|DIR..." >&2; exit 2; }
command -v nm >/dev/null || { echo "objcycles.sh: nm not found (binutils)" >&2; exit 2; }
objs=""
for a in "$@"; do
  if [ -d "$a" ]; then
    if ls "$a"/.libs/*.o >/dev/null 2>&1; then objs="$objs $(ls "$a"/.libs/*.o)"
    else objs="$objs $(ls "$a"/*.o 2>/dev/null)"; fi
  elif [ -f "$a" ]; then objs="$objs $a"
  else echo "objcycles.sh: no such object or folder: $a" >&2; exit 2
  fi
done
[ -n "$objs" ] || { echo "objcycles.sh: no objects in $*" >&2; exit 2; }
# one nm over every object for each list (nm -A names the file on each
# line); a file's node is its name without .o and libtool's per-target prefix
{
  for o in $objs; do echo "$o"; done
  echo "--"
  # shellcheck disable=SC2086
  nm -A --defined-only $objs
  echo "--"
  # shellcheck disable=SC2086
  nm -A -u $objs
} | awk '
function node(f) { sub(/.*\//, "", f); sub(/\.o$/, "", f); sub(/^lib[a-z0-9_]*_la-/, "", f); return f }
$0 == "--" { part++; next }
part == 0 { print "N", node($0); next }
{
  c = index($0, ":"); f = substr($0, 1, c - 1); k = split(substr($0, c + 1), p, " ")
  if (part == 1 && p[k - 1] ~ /^[TDBRCVW]$/) print "D", p[k], node(f)
  if (part == 2) print "U", p[k], node(f)
}' | awk -v verbose="$verbose" '
$1 == "N" { nodes[++nn] = $2; next }
$1 == "D" { def[$2] = $3; next }
$1 == "U" { uses[++nu] = $3 " " $2 }
END {
  ne = 0
  for (i = 1; i <= nu; i++) {
    split(uses[i], p, " ")
    a = p[1]; s = p[2]
    if (!(s in def) || def[s] == a) continue
    e = a " -> " def[s]
    if (!(e in syms)) { order[++ne] = e; reach[a, def[s]] = 1 }
    syms[e] = syms[e] " " s
  }
  if (verbose) for (i = 1; i <= ne; i++) print "  " order[i] ":" syms[order[i]]
  # transitive closure (a few dozen files)
  for (k = 1; k <= nn; k++) for (i = 1; i <= nn; i++) if ((nodes[i], nodes[k]) in reach)
    for (j = 1; j <= nn; j++) if ((nodes[k], nodes[j]) in reach) reach[nodes[i], nodes[j]] = 1
  circles = 0
  for (i = 1; i <= nn; i++) {
    a = nodes[i]
    if (a in done) continue
    done[a] = 1; comp = a; size = 1
    for (j = i + 1; j <= nn; j++) {
      b = nodes[j]
      if (!(b in done) && ((a, b) in reach) && ((b, a) in reach)) { comp = comp " " b; size++; done[b] = 1 }
    }
    if (size < 2) continue
    circles++
    print "circle among " size " files: " comp
    for (k = 1; k <= ne; k++) {
      split(order[k], p, " -> ")
      if (index(" " comp " ", " " p[1] " ") && index(" " comp " ", " " p[2] " ")) print "  " order[k] ":" syms[order[k]]
    }
  }
  if (circles) exit 1
  print "no circle among " nn " files (" ne " edges)"
}'
