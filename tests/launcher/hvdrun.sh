#!/bin/sh
# launcher/hvdrun: argument handling, every error as one line with exit
# status 2, the command lines it builds (mpirun, srun), and a real run of the
# native example through it against the plain trainer.
# Several hosts: tests/launcher/multihost.sh (network namespaces).
. "$(dirname "$0")/../lib.sh"
need_mpirun
HVDRUN="$top_builddir/launcher/hvdrun"
# the MPI the library was built with (hvdrun runs its launcher): openmpi, mpich or other
family=$(sed -n 's/^#define HVD_MPI_FAMILY "\(.*\)"/\1/p' "$top_builddir/config.h")
[ -x "$HVDRUN" ] || fail "launcher/hvdrun not built"

# err EXPECTED ARGS...: hvdrun ARGS fails with status 2 and one line holding EXPECTED
err() {
  _want=$1
  shift
  ${RUN:-"$HVDRUN"} "$@" >"$TMP/out" 2>"$TMP/err" && { cat "$TMP/out"; fail "hvdrun $* succeeded"; }
  _rc=$?
  [ $_rc = 2 ] || { cat "$TMP/err"; fail "hvdrun $*: status $_rc, expected 2"; }
  [ "$(wc -l <"$TMP/err")" = 1 ] || { cat "$TMP/err"; fail "hvdrun $*: more than one line"; }
  grep -qF -- "hvdrun: $_want" "$TMP/err" || { cat "$TMP/err"; fail "hvdrun $*: expected '$_want'"; }
}
err "-np N is required" python3 x.py
err "-np: '0' is not a positive number" -np 0 x
err "-np: 'two' is not a positive number" -np two x
err "no command to run (hvdrun -np 2 python3 train.py)" -np 2
err "unknown option '--fast'" -np 2 --fast x
err "-x '1A=b': not a variable name (-x NAME or -x NAME=VALUE)" -np 2 -x 1A=b x
err "-x HVDCHECK_UNSET: HVDCHECK_UNSET is not set here; give -x HVDCHECK_UNSET=VALUE, or export it first" -np 2 -x HVDCHECK_UNSET x
err "-x needs a variable" -np 2 -x
err "--min-np 4 is more than -np 3" -np 3 --min-np 4 x
err "--min-np: 'x' is not a positive number" -np 3 --min-np=x x
err "--max-np, --elastic-timeout and --reset-limit need --host-discovery-script" -np 2 --max-np 4 x
err "--host-discovery-script $TMP/none.sh: No such file or directory" -np 2 --host-discovery-script=$TMP/none.sh x
printf '#!/bin/sh\necho localhost:2\n' >"$TMP/d.sh"
err "--host-discovery-script $TMP/d.sh is not executable (chmod +x it)" -np 2 --host-discovery-script "$TMP/d.sh" x
chmod +x "$TMP/d.sh"
err "--host-discovery-script lists the hosts: leave out -H and --hostfile" -np 2 -H a:2 --host-discovery-script "$TMP/d.sh" x
err "--max-np 1 is less than -np 2" -np 2 --max-np 1 --host-discovery-script "$TMP/d.sh" x
err "--blacklist-cooldown-range: hvdrun does not keep hosts out after failures" -np 2 --blacklist-cooldown-range 1 x
printf '#!/bin/sh\necho localhost:two\n' >"$TMP/bad.sh"
chmod +x "$TMP/bad.sh"
err "the host discovery script $TMP/bad.sh printed 'localhost:two': not host or host:slots" -np 2 --host-discovery-script "$TMP/bad.sh" x
err "the host discovery script lists 2 slot(s), fewer than the 3 ranks to start, after 1 s (--elastic-timeout)" -np 3 --elastic-timeout 1 --host-discovery-script "$TMP/d.sh" x
# SIGTERM or SIGINT while it waits for hosts ends it then (143, 130; one line), not at --elastic-timeout
for _sig in TERM:143 INT:130; do
  "$HVDRUN" -np 3 --elastic-timeout 60 --host-discovery-script "$TMP/d.sh" x >"$TMP/out" 2>"$TMP/err" &
  _pid=$!
  sleep 1
  _t0=$(date +%s)
  kill -"${_sig%:*}" $_pid
  _rc=0
  wait $_pid || _rc=$?
  [ $_rc = "${_sig#*:}" ] || { cat "$TMP/err"; fail "hvdrun waiting for hosts, SIG${_sig%:*}: status $_rc, expected ${_sig#*:}"; }
  [ $(($(date +%s) - _t0)) -le 5 ] || fail "hvdrun waiting for hosts took more than 5 s to end after SIG${_sig%:*}"
  grep -qxF "hvdrun: SIG${_sig%:*} came while waiting for the job's hosts; the job is not started again" "$TMP/err" &&
    [ "$(wc -l <"$TMP/err")" = 1 ] || { cat "$TMP/err"; fail "hvdrun waiting for hosts, SIG${_sig%:*}: expected one line"; }
done
# SIGINT sent to hvdrun (not from the terminal) while a job of discovered hosts runs: passed on, the job ends (130)
"$HVDRUN" -np 2 --host-discovery-script "$TMP/d.sh" sleep 60 >"$TMP/out" 2>"$TMP/err" &
_pid=$!
sleep 3
kill -INT $_pid
_rc=0
wait $_pid || _rc=$?
[ $_rc = 130 ] || { cat "$TMP/err"; fail "hvdrun with discovered hosts, SIGINT: status $_rc, expected 130"; }
err "-np 5 needs 5 slots, but there are 4 in -H; add --oversubscribe" -np 5 -H a:2,b:2 x
err "-H a:2,b:x (slots of host b): 'x' is not a positive number" -np 2 -H a:2,b:x x
err "give -H or --hostfile, not both" -np 2 -H a --hostfile f x
err "--hostfile $TMP/none: No such file or directory" -np 2 --hostfile "$TMP/none" x
printf '# hosts\nnode1 slots=2\nnode2 slots=1 max_slots=4\n' >"$TMP/hosts"
err "-np 4 needs 4 slots, but there are 3 in the hostfile" -np 4 --hostfile "$TMP/hosts" x
cpus=$(getconf _NPROCESSORS_ONLN)
err "-np $((cpus + 1)) needs $((cpus + 1)) slots, but there are $cpus ($cpus CPUs on this host); add --oversubscribe to run more ranks than slots, or hosts with -H" -np $((cpus + 1)) x
RUN="env PATH=/nonexistent $HVDRUN" err "mpirun not found on PATH (apt-get install $([ "$family" = mpich ] && echo mpich || echo openmpi-bin), or set HVDRUN_MPIRUN=" -np 1 x
RUN="env HVDRUN_LIB=$TMP/none.so $HVDRUN" err "HVDRUN_LIB=$TMP/none.so: No such file or directory" -np 1 x
cp "$HVDRUN" "$TMP/hvdrun-moved"
"$TMP/hvdrun-moved" -np 1 x 2>"$TMP/err" && fail "a moved hvdrun found a library"
grep -q "hvdrun: libhvdshim.so not found (looked in .*); build it (make) or set HVDRUN_LIB=" "$TMP/err" ||
  { cat "$TMP/err"; fail "missing library message"; }
pass "26 wrong uses each refused with one line and status 2"

# The mpirun line: preload, forwarded settings, binding, root flag, hosts.
# (An MPICH build runs MPICH's launcher: there these lines, Open MPI's, come
# from an Open MPI 4.1 stand-in, with a warning that it is another MPI's.)
if [ "$family" = mpich ]; then
  printf '#!/bin/sh\n[ "$1" = --version ] && echo "mpirun (Open MPI) 4.1.4"\n' >"$TMP/ompi41"
  chmod 755 "$TMP/ompi41"
  export HVDRUN_MPIRUN="$TMP/ompi41"
fi
HVDSHIM_CYCLE_TIME=2 HOROVOD_FUSION_THRESHOLD=1M OMP_NUM_THREADS=1 LD_PRELOAD=libm.so.6 \
  "$HVDRUN" --dry-run -np 2 --hostfile "$TMP/hosts" -- python3 -u train.py --lr 0.1 >"$TMP/line" || fail "dry run"
for want in "-np 2 " "--hostfile $TMP/hosts" "--bind-to none --map-by slot" "-x LD_PRELOAD=$top_builddir/.libs/libhvdshim.so:libm.so.6 " \
  "-x HVDSHIM_CYCLE_TIME" "-x HOROVOD_FUSION_THRESHOLD" "-x OMP_NUM_THREADS" " python3 -u train.py --lr 0.1"; do
  grep -qF -- "$want" "$TMP/line" || { cat "$TMP/line"; fail "dry run lacks '$want'"; }
done
if [ "$(id -u)" = 0 ]; then
  grep -qF -- "--allow-run-as-root" "$TMP/line" || { cat "$TMP/line"; fail "root without --allow-run-as-root"; }
  if command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups "$HVDRUN" --dry-run -np 1 x \
    >"$TMP/line-user" 2>/dev/null; then
    grep -qF -- "--allow-run-as-root" "$TMP/line-user" && fail "--allow-run-as-root for a user that is not root"
    echo "(checked as uid 65534 too)"
  fi
else
  grep -qF -- "--allow-run-as-root" "$TMP/line" && fail "--allow-run-as-root for a user that is not root"
fi
"$HVDRUN" --dry-run -np 1 -- sh -c 'echo "a b"' | grep -qF "sh -c 'echo \"a b\"'" || fail "arguments are not quoted for the shell"
# -x NAME[=VALUE] (mpirun's flag): set here where a value is given, forwarded
HOME=/h "$HVDRUN" --dry-run -np 2 -x FOO=bar -x HOME -x HVDSHIM_X=1 -- ./t >"$TMP/lx" || fail "-x dry run"
grep -qF -- "FOO=bar HVDSHIM_X=1 " "$TMP/lx" && grep -qF -- " -x HVDSHIM_X -x FOO -x HOME ./t" "$TMP/lx" ||
  { cat "$TMP/lx"; fail "-x: not set and forwarded"; }
unset HVDRUN_MPIRUN
pass "mpirun line: preload (the user's LD_PRELOAD kept), HVDSHIM_/HOROVOD_/OMP settings and -x ones forwarded, no binding, root flag only as root"

# Other launchers, told apart by their --version: Open MPI 5+ (prterun) takes
# oversubscription as a mapping modifier; MPICH's Hydra gets -n, -hosts (an
# Open MPI hostfile translated), -genv LD_PRELOAD and no root flag.
fake_launcher() { # fake_launcher NAME VERSION-TEXT
  printf '#!/bin/sh\n[ "$1" = --version ] && { printf "%%s\\n" "%s"; exit 0; }\necho "$0" "$@"\n' "$2" >"$TMP/$1"
  chmod +x "$TMP/$1"
}
fake_launcher ompi5 "mpirun (Open MPI) 5.0.7"
HVDRUN_MPIRUN="$TMP/ompi5" "$HVDRUN" --dry-run -np 3 --oversubscribe ./t >"$TMP/l5" || fail "Open MPI 5 dry run"
grep -qF -- "--map-by slot:OVERSUBSCRIBE -x LD_PRELOAD=" "$TMP/l5" && ! grep -qF -- "--oversubscribe" "$TMP/l5" ||
  { cat "$TMP/l5"; fail "Open MPI 5 line"; }
fake_launcher hydra "HYDRA build details:
    Version:                                 4.2.0"
HVDSHIM_CYCLE_TIME=2 HVDRUN_MPIRUN="$TMP/hydra" "$HVDRUN" --dry-run -np 2 --hostfile "$TMP/hosts" ./t >"$TMP/lh" ||
  fail "Hydra dry run"
grep -qF -- "$TMP/hydra -n 2 -hosts node1:2,node2:1 -bind-to none -genv LD_PRELOAD $top_builddir/.libs/libhvdshim.so ./t" "$TMP/lh" &&
  ! grep -qE -- "--allow-run-as-root|-x |--oversubscribe" "$TMP/lh" || { cat "$TMP/lh"; fail "Hydra line"; }
pass "Open MPI 5 and MPICH (Hydra) lines, told apart by --version"

# The launcher of the library's MPI (HVD_MPI_FAMILY in config.h): where
# `mpirun` on PATH is the other MPI's (Debian's alternatives pick one where
# both are installed), each rank of an MPICH build started by Open MPI's
# mpirun found itself alone and trained so, with no error.  hvdrun runs the
# library's own by its Debian name; where there is none: one line, status 2
# (a dry run: the line, and that as a warning).
case $family in
  openmpi) own=mpirun.openmpi other=hydra line="^mpirun.openmpi .*-np 2 " others="Hydra (MPICH) 4.2.0's" lib="Open MPI"
    fake_launcher own "mpirun (Open MPI) 4.1.4" ;;
  mpich) own=mpiexec.mpich other=ompi5 line="^mpiexec.mpich -n 2 " others="Open MPI 5.0.7's" lib=MPICH
    fake_launcher own "HYDRA build details:
    Version:                                 4.2.1" ;;
  *) own= ;;
esac
if [ -n "$own" ]; then
  mkdir "$TMP/both" "$TMP/only"
  cp "$TMP/$other" "$TMP/both/mpirun" && cp "$TMP/own" "$TMP/both/$own" && cp "$TMP/$other" "$TMP/only/mpirun"
  PATH="$TMP/both" "$HVDRUN" --dry-run -np 2 ./t >"$TMP/lb" 2>&1 && grep -q "$line" "$TMP/lb" ||
    { cat "$TMP/lb"; fail "$family build, the other MPI's mpirun first on PATH: $own not run"; }
  RUN="env PATH=$TMP/only $HVDRUN"
  err "mpirun ($TMP/only/mpirun) is $others launcher, but libhvdshim was built with $lib: each rank would find itself alone" -np 2 ./t
  unset RUN
  env PATH="$TMP/only" "$HVDRUN" --dry-run -np 2 ./t >"$TMP/lo" 2>"$TMP/lo.err" && grep -q "^hvdrun: warning: mpirun" "$TMP/lo.err" &&
    grep -q "^mpirun " "$TMP/lo" || { cat "$TMP/lo" "$TMP/lo.err"; fail "dry run with the other MPI's mpirun: no line, or no warning"; }
  pass "$family build: the other MPI's mpirun first on PATH, $own runs; where only it is there, one line and status 2"
fi

# --min-np M: an elastic job (Open MPI 5+: --with-ft ulfm and the two
# settings forwarded); refused by name where the MPI cannot survive a death.
HVDRUN_MPIRUN="$TMP/ompi5" "$HVDRUN" --dry-run -np 2 --min-np 1 ./t >"$TMP/le" || fail "Open MPI 5 elastic dry run"
for want in "--with-ft ulfm" "-x HVDSHIM_ELASTIC " "-x HVDSHIM_ELASTIC_MIN_NP " " ./t"; do
  grep -qF -- "$want" "$TMP/le" || { cat "$TMP/le"; fail "elastic line lacks '$want'"; }
done
# across hosts under Open MPI 5.0 (whose launcher ends the job when it
# loses a host's daemon): one warning line; none under 6, none on one host
HVDRUN_MPIRUN="$TMP/ompi5" "$HVDRUN" --dry-run -np 2 --min-np 1 -H a:1,b:1 ./t >"$TMP/le" 2>"$TMP/le.err" || fail "Open MPI 5 elastic dry run across hosts"
grep -q "^hvdrun: warning: --min-np across hosts under Open MPI 5.0.7: a rank that dies is survived, but a host lost" "$TMP/le.err" ||
  { cat "$TMP/le.err"; fail "no warning about a host lost under Open MPI 5.0"; }
fake_launcher ompi6 "mpirun (Open MPI) 6.0.0rc2"
HVDRUN_MPIRUN="$TMP/ompi6" "$HVDRUN" --dry-run -np 2 --min-np 1 -H a:1,b:1 ./t >"$TMP/le" 2>"$TMP/le.err" || fail "Open MPI 6 elastic dry run across hosts"
HVDRUN_MPIRUN="$TMP/ompi5" "$HVDRUN" --dry-run -np 2 --min-np 1 -H a:2 ./t >"$TMP/le" 2>>"$TMP/le.err" || fail "Open MPI 5 elastic dry run on one host"
# (an MPICH build: the warning that these are Open MPI's launchers, only)
! grep -v "launcher, but libhvdshim was built with" "$TMP/le.err" | grep -q . ||
  { cat "$TMP/le.err"; fail "a warning under Open MPI 6 or on one host"; }
RUN="env HVDRUN_MPIRUN=$TMP/hydra $HVDRUN" err "--min-np: an elastic job needs an MPI that survives a peer's death (ULFM: Open MPI 5 or later" -np 2 --min-np 1 ./t
fake_launcher ompi4 "mpirun (Open MPI) 4.1.4"
RUN="env HVDRUN_MPIRUN=$TMP/ompi4 $HVDRUN" err "--min-np: an elastic job needs an MPI that survives a peer's death (ULFM: Open MPI 5 or later, as on Debian trixie and sid); this mpirun is Open MPI 4.1.4" -np 2 --min-np 1 ./t
# HVDSHIM_ELASTIC=1 set by hand (exported, or -x): as --min-np, its
# minimum HVDSHIM_ELASTIC_MIN_NP's (without --with-ft ulfm Open MPI ends the
# whole job at a rank's death)
HVDSHIM_ELASTIC=1 HVDRUN_MPIRUN="$TMP/ompi5" "$HVDRUN" --dry-run -np 2 ./t >"$TMP/le" || fail "HVDSHIM_ELASTIC=1 dry run"
HVDRUN_MPIRUN="$TMP/ompi5" "$HVDRUN" --dry-run -np 3 --oversubscribe -x HVDSHIM_ELASTIC=on -x HVDSHIM_ELASTIC_MIN_NP=2 ./t >"$TMP/le2" ||
  fail "-x HVDSHIM_ELASTIC=on dry run"
for want in "--with-ft ulfm" "-x HVDSHIM_ELASTIC " "-x HVDSHIM_ELASTIC_MIN_NP "; do
  grep -qF -- "$want" "$TMP/le" && grep -qF -- "$want" "$TMP/le2" || { cat "$TMP/le" "$TMP/le2"; fail "HVDSHIM_ELASTIC=1: the line lacks '$want'"; }
done
HVDSHIM_ELASTIC=0 HVDRUN_MPIRUN="$TMP/ompi5" "$HVDRUN" --dry-run -np 2 ./t >"$TMP/le" && ! grep -q "with-ft" "$TMP/le" ||
  { cat "$TMP/le"; fail "HVDSHIM_ELASTIC=0: not an elastic job"; }
RUN="env HVDSHIM_ELASTIC=1 HVDSHIM_ELASTIC_MIN_NP=3 HVDRUN_MPIRUN=$TMP/ompi5 $HVDRUN" err "HVDSHIM_ELASTIC_MIN_NP 3 is more than -np 2" -np 2 ./t
RUN="env HVDSHIM_ELASTIC=1 HVDRUN_MPIRUN=$TMP/ompi4 $HVDRUN" err "HVDSHIM_ELASTIC=1: an elastic job needs an MPI that survives a peer's death (ULFM: Open MPI 5 or later, as on Debian trixie and sid); this mpirun is Open MPI 4.1.4" -np 2 ./t
pass "--min-np: mpirun --with-ft ulfm with HVDSHIM_ELASTIC and its minimum under Open MPI 5 (across hosts under 5.0: a warning that a lost host ends the job), as HVDSHIM_ELASTIC=1 set by hand gives; refused with one line under Open MPI 4 and MPICH"

# Under SLURM: srun with the preload exported to the tasks.
printf '#!/bin/sh\necho srun "$@"\n' >"$TMP/srun" && chmod +x "$TMP/srun"
SLURM_JOB_ID=42 PATH="$TMP:$PATH" "$HVDRUN" --dry-run -np 3 --oversubscribe ./t >"$TMP/sline" || fail "srun dry run"
grep -qF "$TMP/srun --ntasks=3 --overcommit --export=ALL,LD_PRELOAD=$top_builddir/.libs/libhvdshim.so ./t" "$TMP/sline" ||
  { cat "$TMP/sline"; fail "srun line"; }
pass "inside a SLURM allocation it runs srun"

# A program named without a path is the one the caller's shell would run (a
# virtual environment's python3 first on PATH), not the one beside mpirun:
# hvdrun runs the mpirun it found on PATH as "mpirun" (Open MPI takes an
# absolute path as --prefix and puts its bin folder first on the ranks' PATH).
mkdir "$TMP/venv"
printf '#!/bin/sh\necho "the caller'"'"'s python3 ran"\n' >"$TMP/venv/python3"
chmod +x "$TMP/venv/python3"
PATH="$TMP/venv:$(dirname "$MPIRUN"):$PATH" timeout -k 5 60 "$HVDRUN" -np 1 python3 </dev/null >"$TMP/venv.log" 2>&1 ||
  { cat "$TMP/venv.log"; fail "hvdrun -np 1 python3 (a python3 first on PATH)"; }
grep -q "the caller's python3 ran" "$TMP/venv.log" || { cat "$TMP/venv.log"; fail "the ranks ran another python3 than the caller's"; }
PATH="$(dirname "$MPIRUN"):$PATH" "$HVDRUN" --dry-run -np 1 x | grep -qE "^(mpirun|mpiexec\.mpich) " ||
  fail "dry run: mpirun from PATH not named as typed"
pass "a program named without a path is the caller's (python3 first on PATH runs in the ranks)"

# A rank killed where the launcher ends 0 all the same (MPICH 4.2's Hydra
# after a rank's SIGKILL, in most runs; Open MPI 6's prterun under ULFM):
# a fake launcher that starts two preloaded ranks itself, rank 1 SIGKILLs
# itself, and exits 0.  The rank's reaper notes it in hvdrun's status file:
# hvdrun ends non-zero, naming the rank; not in an elastic job (it goes on
# without the rank); and a rank whose HVDSHIM_STATUS_FILE names an hvdrun
# that is not its ancestor (Hydra passes it to the ranks of every host)
# writes no file.
# (the fake is the launcher of the library's MPI: hvdrun refuses another's)
case $family in
  mpich) version='HYDRA build details:\\n    Version: 4.2.1' var=PMI ;;
  *) version='mpirun (Open MPI) 6.0.0' var=OMPI_COMM_WORLD ;;
esac
printf '#!/bin/sh\n[ "$1" = --version ] && { printf "%s\\n"; exit 0; }
for r in 0 1; do %s_RANK=$r %s_SIZE=2 LD_PRELOAD="%s" sh -c "[ \\$%s_RANK = 1 ] && kill -9 \\$\\$; exit 0" & done
wait
exit 0\n' "$version" $var $var "$LIB" $var >"$TMP/zero"
chmod +x "$TMP/zero"
HVDRUN_MPIRUN="$TMP/zero" timeout -k 5 60 "$HVDRUN" -np 2 ./t </dev/null >"$TMP/zero.log" 2>&1
_rc=$?
[ $_rc = 137 ] || [ $_rc = 1 ] || { cat "$TMP/zero.log"; fail "a rank SIGKILLed, the launcher ending 0: hvdrun ended with $_rc"; }
grep -q "^hvdrun: rank 1 \((SIGKILL) \)\?ended abnormally (killed or crashed), and $TMP/zero ended with 0 all the same; hvdrun ends with $_rc$" \
  "$TMP/zero.log" || { cat "$TMP/zero.log"; fail "a rank SIGKILLed, the launcher ending 0: no line naming rank 1"; }
# (elastic: Open MPI 5+ only; hvdrun refuses it under Hydra, below)
[ $family = mpich ] || HVDSHIM_ELASTIC=1 HVDRUN_MPIRUN="$TMP/zero" timeout -k 5 60 "$HVDRUN" -np 2 ./t </dev/null >"$TMP/zero-elastic.log" 2>&1 ||
  { cat "$TMP/zero-elastic.log"; fail "elastic: a rank SIGKILLed, the launcher ending 0: hvdrun did not end 0"; }
# (under the test's shell, an ancestor, the same rank writes it)
killed_rank() { # killed_rank STATUS-FILE: a rank 1 that SIGKILLs itself, its reaper given 5 s
  HVDSHIM_STATUS_FILE=$1 env ${var}_RANK=1 ${var}_SIZE=2 LD_PRELOAD="$LIB" sh -c 'kill -9 $$'
  wait_until 5 "[ -e '$1' ]" || true
}
sleep 30 &
other=$!
status="/dev/shm/hvdshim-status-$other-$(id -u)"
killed_rank "$status" 2>/dev/null
kill $other
[ ! -e "$status" ] || { rm -f "$status"; fail "a rank under another hvdrun than its status file's wrote it"; }
status="/dev/shm/hvdshim-status-$$-$(id -u)"
killed_rank "$status" 2>/dev/null
[ -e "$status" ] || fail "a rank under the hvdrun its status file names (the test's shell) did not write it"
grep -q "^\(137 1 9\|1 1 -1\) [0-9]*$" "$status" || { cat "$status"; rm -f "$status"; fail "status file: not 'CODE RANK SIGNAL WHEN'"; }
rm -f "$status"
pass "a rank SIGKILLed, the launcher ending 0 (a fake one): hvdrun ends with $_rc and names rank 1; 0 in an elastic job; no status file written under another hvdrun"

# A real run: the native example through hvdrun at np=2 (verbose: the line
# is printed), against the plain trainer with a 2x batch.
. "$top_srcdir/tests/native/native-lib.sh"
build_lib "$BIN"
build_train "$BIN" train
"$BIN/train" --steps 100 --batch 32 --out "$TMP/ref.bin" >/dev/null || fail "plain run"
HVDRUN_MPIRUN="$MPIRUN" HVDSHIM_HOOKS="$EX/mlp.hooks" timeout -k 5 120 "$HVDRUN" --verbose -np 2 --oversubscribe "$BIN/train" --steps 100 \
  --batch 16 --out "$TMP/np2.bin" </dev/null >"$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; fail "hvdrun -np 2"; }
case $MPI_KIND in hydra) line="^hvdrun: $MPIRUN .*-genv LD_PRELOAD .*/train --steps 100" ;;
  *) line="^hvdrun: $MPIRUN .*-x HVDSHIM_HOOKS .*/train --steps 100" ;; esac
grep -q "$line" "$TMP/run.log" || { cat "$TMP/run.log"; fail "--verbose line"; }
same "$TMP/ref.bin" "$TMP/np2.bin" || fail "hvdrun -np 2 differs from the plain run"
pass "hvdrun -np 2 trains the native example like the plain run with a 2x batch"

# The other MPI's launcher run by hand (where both are installed: the
# trixie stacks): every rank says it found itself alone, and the job fails
case $family in
  openmpi) wrong=$(command -v mpiexec.mpich) wrong_args= ;;
  mpich) wrong=$(command -v mpirun.openmpi) wrong_args="--allow-run-as-root --oversubscribe" ;;
  *) wrong= ;;
esac
if [ -n "$wrong" ]; then
  HVDSHIM_HOOKS="$EX/mlp.hooks" LD_PRELOAD="$LIB" timeout -k 5 120 "$wrong" $wrong_args -n 2 "$BIN/train" --steps 100 \
    --batch 16 </dev/null >"$TMP/wrong.log" 2>&1 && { cat "$TMP/wrong.log"; fail "$wrong: the job ended 0"; }
  grep -q "the launcher started 2 ranks (\(OMPI_COMM_WORLD_SIZE\|PMI_SIZE\)=2) but this rank's MPI (.*) found itself alone" "$TMP/wrong.log" ||
    { cat "$TMP/wrong.log"; fail "$wrong: no line naming the other MPI's launcher"; }
  pass "the other MPI's launcher ($wrong): the job fails, its ranks say they found themselves alone"
fi
