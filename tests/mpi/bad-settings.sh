#!/bin/sh
# Every setting of the table fed malformed values (not a number, negative,
# out of range, unknown choice, empty): each is refused with one line naming
# the variable, the value and what is accepted.  The sweep goes through
# `hvdshim-info --check`, which loads the settings with the very parser the
# ranks use (base/config.c); one bad value of each type then goes under
# mpirun, where it must end the job before any work, non-zero, with that
# line (rank 0's; a rank > 0 says it only if still running 2 s later).  An
# unknown HVDSHIM_* variable gets one warning with the nearest valid name,
# and the job runs.
. "$(dirname "$0")/../lib.sh"
need_mpirun
INFO="$top_builddir/tools/hvdshim-info"
tried=0 jobs=0 launched="" empty_done=""
"$INFO" --markdown | sed -n 's/^| `\(HVDSHIM_[A-Z_]*\)` | [^|]* | \([a-z]*\) |.*/\1 \2/p' >"$TMP/table"
[ -s "$TMP/table" ] || fail "could not read the settings table from hvdshim-info"
while read -r var type; do
  case $type in
  bool) bad="maybe|2|" ;;
  int | bytes) bad="lots|-1|99999999999999999999999|1.5|" ;;
  number) bad="fast|-1|1e99|" ;;
  choice) bad="loud|" ;;
  *) continue ;;
  esac
  printf '%s\n' "$bad" | tr '|' '\n' >"$TMP/values" # the last value is the empty string
  while IFS= read -r value; do
    tried=$((tried + 1))
    (export "$var=$value" && "$INFO" --check >"$TMP/out" 2>&1) && { cat "$TMP/out"; fail "$var='$value' was accepted"; }
    grep -q "invalid $var='$value': .*accepted" "$TMP/out" || { cat "$TMP/out"; fail "$var='$value': no line naming it"; }
    # under mpirun: the first bad value of each type, and one empty value
    case " $launched " in *" $type "*) [ -n "$value" ] && continue ;; esac
    [ -z "$value" ] && [ -n "$empty_done" ] && continue
    launched="$launched $type"
    [ -z "$value" ] && empty_done=1
    (export "$var=$value" && T=60 mpi 2 -x "$var" "$ENGINE_TEST" random 1 2 1 1 >"$TMP/out" 2>&1) &&
      { cat "$TMP/out"; fail "$var='$value' was accepted by the ranks"; }
    ranks_said "$TMP/out" "error.*invalid $var='$value': .*accepted" 2 ||
      { cat "$TMP/out"; fail "$var='$value': expected the error line (one per rank that printed before the job ended)"; }
    grep -q " OK stats" "$TMP/out" && fail "$var='$value': work ran despite the bad setting"
    jobs=$((jobs + 1))
  done <"$TMP/values"
done <"$TMP/table"
[ "$tried" -ge 40 ] || fail "only $tried bad values tried"
[ "$jobs" -ge 5 ] || fail "only $jobs bad values tried under mpirun"
HVDSHIM_FUSION_TRESHOLD=1 mpi 2 -x HVDSHIM_FUSION_TRESHOLD "$ENGINE_TEST" random 1 2 1 1 >"$TMP/unknown" 2>&1 || { cat "$TMP/unknown"; fail "unknown variable broke the job"; }
[ "$(grep -c "unknown setting HVDSHIM_FUSION_TRESHOLD (did you mean HVDSHIM_FUSION_THRESHOLD?)" "$TMP/unknown")" = 1 ] ||
  { cat "$TMP/unknown"; fail "expected one warning with a suggestion"; }
pass "$tried malformed values rejected ($jobs of them under mpirun: the job ends on every rank); unknown variable warned"
