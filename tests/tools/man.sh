#!/bin/sh
# The manual pages (docs/man/*.in, built into man/ by make): each renders
# without a warning; each tool's --help and its page list the same options;
# --version says the version the pages carry; hvdshim(7) has every setting
# of base/settings.def; and after `make install` into a folder, `man` finds
# each page there.
. "$(dirname "$0")/../lib.sh"
command -v groff >/dev/null || skip "groff not found (apt-get install groff-base)"
M="$top_builddir/man"
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"/\1/p' "$top_builddir/config.h")
for page in hvdrun.1 hvdshim-ab.1 hvdshim-info.1 hvdshim.7; do
  [ -f "$M/$page" ] || fail "$page not built (make builds man/)"
  w=$(groff -man -ww -z "$M/$page" 2>&1)
  [ -z "$w" ] || { echo "$w"; fail "$page: groff warns"; }
  grep -q "^\.TH .* \"hvdshim $version\"" "$M/$page" || fail "$page: its header does not say hvdshim $version"
done
pass "4 pages render without a warning (groff -man -ww) and carry version $version"
# options: those a tool's --help lists on its option lines, and those its
# page lists in OPTIONS
PYTHON=${PYTHON:-python3}
check_options() { # TOOL COMMAND...
  _tool=$1
  shift
  "$@" --help >"$TMP/help" 2>&1 || fail "$_tool --help failed"
  v=$("$@" --version 2>&1) || fail "$_tool --version failed"
  [ "$v" = "$_tool (hvdshim) $version" ] || fail "$_tool --version says '$v', not '$_tool (hvdshim) $version'"
  groff -man -Tutf8 -P-c -P-b -P-u "$M/$_tool.1" 2>/dev/null | sed 's/\xe2\x80\x90/-/g' >"$TMP/page"
  "$PYTHON" - "$TMP/help" "$TMP/page" "$_tool" <<'PY' || fail "$_tool: --help and the page differ"
import re, sys
help_text, page, tool = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
opt = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")
# --help: the lines that start with an option (after indentation)
h = set()
for line in help_text.splitlines():
    m = re.match(r"\s+(-.*?)(\s{2,}|$)", line)
    if m:
        h |= set(opt.findall(m.group(1)))
# the page: the option lines of its OPTIONS section (indented 7, then the text at 14)
sec = page.split("\nOPTIONS\n", 1)[1]
sec = re.split(r"\n[A-Z][A-Z ]+\n", sec, maxsplit=1)[0]
p = set()
for line in sec.splitlines():
    if re.match(r" {7}-", line):
        p |= set(opt.findall(line))
if h != p:
    print("%s: only in --help: %s; only in the page: %s" % (tool, sorted(h - p), sorted(p - h)))
    sys.exit(1)
print("%s: %d options, the same in --help and the page" % (tool, len(h)))
PY
}
check_options hvdrun "$top_builddir/launcher/hvdrun"
check_options hvdshim-info "$top_builddir/tools/hvdshim-info"
check_options hvdshim-ab "$PYTHON" "$top_srcdir/tools/hvdshim-ab" --hvdrun "$top_builddir/launcher/hvdrun"
pass "hvdrun, hvdshim-info, hvdshim-ab: --help and the page list the same options; --version says $version"
missing=$("$top_builddir/tools/hvdshim-info" --markdown | sed -n 's/^| `\(HVDSHIM_[A-Z0-9_]*\)`.*/\1/p' | while read -r s; do
  grep -q "^\.B $s\$" "$M/hvdshim.7" || echo "$s"; done)
[ -z "$missing" ] || fail "hvdshim(7) lacks settings: $missing"
pass "hvdshim(7) describes every setting ($("$top_builddir/tools/hvdshim-info" --markdown | grep -c '^| `HVDSHIM_'))"
command -v man >/dev/null || skip "man not found (apt-get install man-db): the pages are right, not read through man"
make -s -C "$top_builddir" install-man DESTDIR="$TMP/inst" >/dev/null 2>&1 || fail "make install-man failed"
mandir=$(find "$TMP/inst" -type d -name man1 | head -1)
[ -n "$mandir" ] || fail "make install-man installed no man1 folder"
for page in hvdrun hvdshim-ab hvdshim-info "7 hvdshim"; do
  # shellcheck disable=SC2086
  MANPATH="${mandir%/man1}" MANWIDTH=80 man $page 2>&1 | grep -q -i "^NAME" || fail "man $page: not found after make install"
done
pass "after make install, man finds hvdrun(1), hvdshim-ab(1), hvdshim-info(1) and hvdshim(7)"
