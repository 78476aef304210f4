#!/bin/sh
# The README's settings table is the one the settings table generates.
. "$(dirname "$0")/../lib.sh"
README="$top_srcdir/README.md"
sed -n '/<!-- settings:begin -->/,/<!-- settings:end -->/p' "$README" | sed '1d;$d' >"$TMP/readme"
"$top_builddir/tools/hvdshim-info" --markdown >"$TMP/generated"
diff -u "$TMP/generated" "$TMP/readme" || fail "README settings table is stale: regenerate it with tools/hvdshim-info --markdown"
pass "README settings table matches base/settings.def"
