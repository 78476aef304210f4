#!/bin/sh
# make install (into a folder: DESTDIR) installs what a user and the Debian
# packages need: the library and its run-time name, the header, hvdshim.pc,
# the tools, the four manual pages, and every Python module of the source
# tree (hooks/python, the adapter and the served horovod package: Makefile.am
# lists them one by one, so a new module it forgets is missing from every
# installation); pkg-config finds the installed library.
. "$(dirname "$0")/../lib.sh"
D="$TMP/inst"
make -s -C "$top_builddir" install DESTDIR="$D" >"$TMP/log" 2>&1 || { tail -20 "$TMP/log"; fail "make install DESTDIR=... failed"; }
prefix=$(sed -n 's/^prefix=//p' "$top_builddir/hvdshim.pc")
libdir=$(sed -n 's/^libdir=//p' "$top_builddir/hvdshim.pc" | sed "s|\${exec_prefix}|$prefix|; s|\${prefix}|$prefix|")
soname=$(sed -n 's/^#define HVD_SONAME "\(.*\)"/\1/p' "$top_builddir/config.h")
for f in "$libdir/$soname" "$libdir/libhvdshim.so" "$libdir/pkgconfig/hvdshim.pc" "$prefix/include/hvdshim.h" \
  "$prefix/bin/hvdrun" "$prefix/bin/hvdshim-info" "$prefix/bin/hvdshim-ab" "$prefix/share/man/man1/hvdrun.1" \
  "$prefix/share/man/man1/hvdshim-ab.1" "$prefix/share/man/man1/hvdshim-info.1" "$prefix/share/man/man7/hvdshim.7"; do
  [ -e "$D$f" ] || fail "make install did not install $f"
done
readelf -d "$D$libdir/$soname" 2>/dev/null | grep -q "SONAME.*\[$soname\]" || fail "$soname does not carry its own name as SONAME"
py="$prefix/share/hvdshim/python"
(cd "$top_srcdir/hooks/python" && find . -name '*.py' | sort) >"$TMP/src"
(cd "$D$py" && find . -name '*.py' | sort) >"$TMP/inst.list"
diff "$TMP/src" "$TMP/inst.list" >"$TMP/diff" || { cat "$TMP/diff"; fail "the installed Python modules differ from hooks/python's (< only in the sources: add them to Makefile.am)"; }
if command -v pkg-config >/dev/null; then
  libs=$(PKG_CONFIG_PATH="$D$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D" pkg-config --libs hvdshim) || fail "pkg-config --libs hvdshim failed"
  case $libs in *-lhvdshim*) ;; *) fail "pkg-config --libs hvdshim: $libs" ;; esac
fi
pass "make install: $soname (its SONAME), the header, hvdshim.pc, 3 tools, 4 manual pages, $(wc -l <"$TMP/src") Python modules (all of hooks/python)"
