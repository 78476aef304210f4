#!/bin/sh
# docs/SETTINGS.md's table is the one base/settings.def generates
# (tools/hvdshim-info --markdown).
. "$(dirname "$0")/../lib.sh"
PAGE="$top_srcdir/docs/SETTINGS.md"
sed -n '/<!-- settings:begin -->/,/<!-- settings:end -->/p' "$PAGE" | sed '1d;$d' >"$TMP/page"
[ -s "$TMP/page" ] || fail "docs/SETTINGS.md has no table between <!-- settings:begin --> and <!-- settings:end -->"
"$top_builddir/tools/hvdshim-info" --markdown >"$TMP/generated"
diff -u "$TMP/generated" "$TMP/page" || fail "docs/SETTINGS.md's table is stale: regenerate it with tools/hvdshim-info --markdown"
pass "docs/SETTINGS.md's table matches base/settings.def"
