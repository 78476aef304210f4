#!/bin/sh
# docs/ARCHITECTURE.md walks the source by name: every file, library
# function (hvd_*) and adapter name (module.name) it gives in backticks
# exists (tests/unit/docnames.py), so the walk cannot drift from the code.
. "$(dirname "$0")/../lib.sh"
bad=$("$PYTHON" "$top_srcdir/tests/unit/docnames.py" "$top_srcdir" "$top_srcdir/docs/ARCHITECTURE.md") ||
  fail "tests/unit/docnames.py failed"
[ -z "$bad" ] || { echo "$bad"; fail "docs/ARCHITECTURE.md names $(echo "$bad" | wc -l) thing(s) the code does not have"; }
pass "every file, hvd_* function and adapter name docs/ARCHITECTURE.md gives exists ($(grep -o '`[^`]*`' "$top_srcdir/docs/ARCHITECTURE.md" | sort -u | wc -l) names read)"
