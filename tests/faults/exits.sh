#!/bin/sh
# How a rank's script ends decides the job's end (np=3, unmodified script):
#  - an uncaught exception on one rank: the job ends at once, non-zero, the
#    traceback shown; on every rank: rank 0's traceback alone;
#  - sys.exit(3) in the middle of an epoch: the same, and the job's status
#    is 3, as the rank's (the launcher's, through the shim's MPI_Abort);
#  - sys.exit(0) in the middle of an epoch: that rank joins; the others
#    finish their training and the job exits 0;
#  - a stopping rule on the local loss (ranks stop at different steps):
#    each joins when it stops, the job exits 0, and at every step all ranks
#    still training hold the same weights;
#  - a rank that ends before it starts MPI (its command fails before
#    importing torch, np=2) where the launcher keeps the job alive (mpirun
#    --enable-recovery, Hydra's -disable-auto-cleanup): the other, whose
#    MPI_Init would wait for it for ever, names it and ends within 60 s
#    (the launcher's status is its own: Open MPI 4.1's is 0 in that mode);
#    one still starting (a process named as the launcher for 8 s, as its
#    fork before the exec) is not named, and the job finishes.
# No case leaves a process behind.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
T=120
tag="exits-$$"

t0=$(now_ms)
shim 3 "$PYTHON" "$FAULT_TRAIN" --fault raise --fault-rank 1 --fault-at 5 --steps 100000 --tag "$tag" >"$TMP/raise" 2>&1 &&
  { cat "$TMP/raise"; fail "exception: the job exited 0"; }
took=$(($(now_ms) - t0))
grep -q "Traceback" "$TMP/raise" && grep -q "RuntimeError: injected fault at step 5" "$TMP/raise" ||
  { cat "$TMP/raise"; fail "exception: no traceback"; }
grep -q "hvdshim\[1\]: error (lifecycle): this rank is exiting with status 1" "$TMP/raise" ||
  { cat "$TMP/raise"; fail "exception: the shim did not say why the job ends"; }
# (a bound on a hang, not a timing: it holds the job's start, 3 ranks
# importing torch on 2 cores, 30.5 s once on sid beside another stack's suites)
[ "$took" -lt 60000 ] || fail "exception: the job took $took ms"
no_leftovers "$tag"
echo "exception: job ended after $took ms with the traceback"
# the same exception on every rank (a shape error in the script's own line):
# rank 0's traceback alone (a rank > 0 prints its own a second late, or,
# where rank 0 on its host fails too, after rank 0's end, by when rank 0
# has ended the job), also where rank 0 takes longer than that second to
# end (an atexit handler of 2 s)
shim 3 "$PYTHON" "$FAULT_TRAIN" --fault raise --fault-rank -1 --fault-at 5 --steps 100000 --slow-end 2 --tag "$tag" \
  >"$TMP/raise-all" 2>&1 &&
  { cat "$TMP/raise-all"; fail "exception on every rank: the job exited 0"; }
# (before rank 0's notice, Open MPI 5 and 6's prterun ended the other ranks
# later than their second, and they printed theirs too)
nt=$(grep -c "Traceback" "$TMP/raise-all")
[ "$nt" = 1 ] && grep -q "^\[rank 0\] RuntimeError: injected fault at step 5" "$TMP/raise-all" ||
  { cat "$TMP/raise-all"; fail "exception on every rank: expected rank 0's traceback alone"; }
no_leftovers "$tag"
echo "exception on every rank: rank 0's traceback alone"

# a command-line error argparse reports (usage and message, then exit 2)
# is the same on every rank: rank 0's alone (python/sitecustomize.py)
rc=0
shim 3 "$PYTHON" "$FAULT_TRAIN" --no-such-option >"$TMP/usage" 2>&1 || rc=$?
[ $rc = 2 ] && [ "$(grep -c "error: unrecognized arguments: --no-such-option" "$TMP/usage")" = 1 ] &&
  grep -q "^\[rank 0\] .*error: unrecognized arguments" "$TMP/usage" ||
  { cat "$TMP/usage"; fail "argparse's error on every rank: expected rank 0's alone and status 2 (status $rc)"; }
no_leftovers "$tag"
echo "argparse's error on every rank: rank 0's alone"

rc=0
shim 3 "$PYTHON" "$FAULT_TRAIN" --fault exit --exit-code 3 --fault-rank 2 --fault-at 5 --steps 100000 --tag "$tag" >"$TMP/exit3" 2>&1 ||
  rc=$?
[ $rc = 3 ] || { cat "$TMP/exit3"; fail "sys.exit(3) on rank 2: the job's status is $rc, not 3"; }
grep -q "hvdshim\[2\]: error (lifecycle): this rank is exiting with status 3" "$TMP/exit3" || { cat "$TMP/exit3"; fail "sys.exit(3): no message"; }
no_leftovers "$tag"

shim 3 "$PYTHON" "$FAULT_TRAIN" --fault exit --exit-code 0 --fault-rank 1 --fault-at 5 --steps 30 --tag "$tag" >"$TMP/exit0" 2>&1 ||
  { cat "$TMP/exit0"; fail "sys.exit(0) mid-epoch: the job failed"; }
grep -q "\[rank 1\] exiting at step 5 with status 0" "$TMP/exit0" || { cat "$TMP/exit0"; fail "rank 1 did not exit early"; }
[ "$(grep -c "\] done 30" "$TMP/exit0")" = 2 ] || { cat "$TMP/exit0"; fail "sys.exit(0): the other ranks did not finish"; }
no_leftovers "$tag"

HVDSHIM_LOG_LEVEL=info shim 3 "$PYTHON" "$FAULT_TRAIN" --fault stop-on-loss --checksums --steps 60 --tag "$tag" >"$TMP/stop" 2>&1 ||
  { cat "$TMP/stop"; fail "stopping rule: the job failed"; }
stops=$(grep -c "stopping at step" "$TMP/stop" || true)
[ "$stops" -ge 1 ] || { cat "$TMP/stop"; fail "stopping rule: no rank stopped early"; }
grep -q "rank(s) .* finished; the others go on" "$TMP/stop" || { cat "$TMP/stop"; fail "stopping rule: no join reported"; }
grep -q "warning (torch): [12] of 3 ranks finished the script while this rank still trains (its backward after optimizer step [0-9]*): training goes on over the [12] left" "$TMP/stop" ||
  { cat "$TMP/stop"; fail "stopping rule: no warning that training goes on over the ranks left"; }
bad=$(sed -n 's/.*\] ck \([0-9]*\) \(.*\)/\1 \2/p' "$TMP/stop" | sort -u | awk '{n[$1]++} END {for (k in n) if (n[k] > 1) print k}')
[ -z "$bad" ] || { cat "$TMP/stop"; fail "ranks still training disagree on the weights at step(s) $bad"; }
no_leftovers "$tag"
RECOVER=--enable-recovery
[ "$MPI_KIND" = hydra ] && RECOVER=-disable-auto-cleanup
t0=$(now_ms)
shim 2 $RECOVER "$(by_rank "$PYTHON $FAULT_TRAIN --steps 30 --tag $tag" "sh -c 'exit 3'")" >"$TMP/before-mpi" 2>&1
took=$(($(now_ms) - t0))
grep -q "hvdshim\[0\]: error (engine_life.c:[0-9]*): \(local rank 1 of [^ ]*\|rank 1 (pid [0-9]* on [^ ]*)\) ended before every rank had started MPI" "$TMP/before-mpi" ||
  { cat "$TMP/before-mpi"; fail "a rank gone before MPI: the other did not name it"; }
[ "$took" -lt 60000 ] || { cat "$TMP/before-mpi"; fail "a rank gone before MPI: the job took $took ms"; }
no_leftovers "$tag"
echo "a rank gone before MPI ($RECOVER): named, job ended after $took ms"
# ... but a rank still starting is not gone: the launcher's fork of it not
# yet exec'd (Open MPI 4's child closes every descriptor first; seconds on a
# loaded host) is seen as a process named as the launcher, without the
# rank's environment (it was named gone after 2.5 s, and the job ended):
# here rank 1 is such a process for 8 s, then the rank
cat >"$TMP/late.sh" <<EOF_SH
#!/bin/sh
# (a process named as this launcher, the rank's environment kept aside)
mkdir -p "$TMP/late" && env -0 >"$TMP/late/env" && cp "$TMP/late.py" "$TMP/late/\$(cat /proc/\$PPID/comm)"
exec env -i PATH=/usr/bin:/bin "$TMP/late/\$(cat /proc/\$PPID/comm)" "$TMP/late/env" $(command -v "$PYTHON") $FAULT_TRAIN --steps 30 --tag $tag
EOF_SH
printf '#!%s\nimport os, sys, time\ntime.sleep(8)\nenv = dict(v.split("=", 1) for v in open(sys.argv[1]).read().split("\\0") if "=" in v)\nos.execve(sys.argv[2], sys.argv[2:], env)\n' \
  "$(command -v "$PYTHON")" >"$TMP/late.py"
chmod +x "$TMP/late.sh" "$TMP/late.py"
shim 2 "$(by_rank "$PYTHON $FAULT_TRAIN --steps 30 --tag $tag" "$TMP/late.sh")" >"$TMP/late.out" 2>&1 ||
  { cat "$TMP/late.out"; fail "a rank still starting (8 s as a fork of the launcher): the job failed"; }
! grep -q "ended before every rank had started MPI" "$TMP/late.out" || { cat "$TMP/late.out"; fail "a rank still starting was named gone"; }
[ "$(grep -c "\] done 30" "$TMP/late.out")" = 2 ] || { cat "$TMP/late.out"; fail "a rank still starting: the ranks did not both finish"; }
no_leftovers "$tag"
pass "exception and sys.exit(3) end the job; sys.exit(0) and a local stopping rule ($stops rank(s) stopped early) join, exit 0, weights agree; a rank gone before MPI is named, one still starting is not"
