#!/bin/sh
# SLURM for real: a one-node cluster started here (munged, slurmctld, slurmd
# on loopback, in this test's folder, for this host's cores), then the
# native example run as a cluster user would, compared with the plain
# trainer with a 2x batch:
#   salloc -n 2 hvdrun -np 2 ...    (hvdrun runs srun inside the allocation)
#   srun -n 2 --mpi=pmix --export=ALL,LD_PRELOAD=libhvdshim.so ...
#   sbatch of docs/LAUNCHER.md's script
# Skips, with the reason, where the daemons are not installed (apt-get
# install slurmctld slurmd slurm-client munge) or cannot start (not root).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_open_mpi "srun --mpi=pmix with Debian's Open MPI"
for c in munged slurmctld slurmd srun salloc sbatch squeue sinfo scontrol; do
  command -v $c >/dev/null 2>&1 || skip "$c not found (apt-get install slurmctld slurmd slurm-client munge)"
done
[ "$(id -u)" = 0 ] || skip "the test's slurmd runs as root (it starts jobs as any user)"
HVDRUN="$top_builddir/launcher/hvdrun"
D="$TMP/slurm"
mkdir -p "$D/state" "$D/spool" "$D/log"
host=$(hostname -s)
cpus=$(getconf _NPROCESSORS_ONLN)
port=$((17000 + $$ % 2000))
pids=""
stop() {
  for p in $pids; do kill "$p" 2>/dev/null; done
  [ -f "$D/munged.pid" ] && kill "$(cat "$D/munged.pid")" 2>/dev/null
  sleep 0.3
  rm -rf "$TMP"
}
trap stop EXIT
dd if=/dev/urandom of="$D/munge.key" bs=1024 count=1 2>/dev/null && chmod 400 "$D/munge.key"
munged --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/munged.pid" --log-file="$D/munged.log" \
  --seed-file="$D/munge.seed" --force 2>"$D/munged.err" || skip "munged cannot start: $(head -1 "$D/munged.err")"
cat >"$D/slurm.conf" <<EOF
ClusterName=hvdtest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
export SLURM_CONF="$D/slurm.conf"
slurmctld -D -f "$SLURM_CONF" >"$D/log/slurmctld.out" 2>&1 &
pids="$pids $!"
slurmd -D -f "$SLURM_CONF" >"$D/log/slurmd.out" 2>&1 &
pids="$pids $!"
i=0
until sinfo -h -o %T 2>/dev/null | grep -q idle; do
  i=$((i + 1))
  [ $i -le 50 ] || { tail -5 "$D/log/slurmctld.log" "$D/log/slurmd.log" 2>/dev/null; skip "the SLURM daemons did not come up in 10 s"; }
  sleep 0.2
done

. "$top_srcdir/tests/native/native-lib.sh"
build_lib "$BIN"
build_train "$BIN" train
"$BIN/train" --steps 100 --batch 32 --out "$TMP/ref.bin" >/dev/null || fail "plain run"
export HVDSHIM_HOOKS="$EX/mlp.hooks"
# 1. salloc + hvdrun: srun inside the allocation, --mpi=pmix added (MpiDefault=none)
timeout -k 5 120 salloc -n 2 "$HVDRUN" --verbose -np 2 -- "$BIN/train" --steps 100 --batch 16 --out "$TMP/salloc.bin" \
  </dev/null >"$TMP/salloc.log" 2>&1 || { cat "$TMP/salloc.log"; fail "salloc -n 2 hvdrun"; }
grep -q "^hvdrun: .*srun --ntasks=2 --mpi=pmix --export=ALL,LD_PRELOAD=" "$TMP/salloc.log" || { cat "$TMP/salloc.log"; fail "hvdrun's srun line"; }
same "$TMP/ref.bin" "$TMP/salloc.bin" || fail "salloc + hvdrun differs from the plain run"
pass "salloc -n 2 hvdrun: srun --mpi=pmix, same result as the plain run with a 2x batch"
# 2. srun directly, the preload in --export
timeout -k 5 120 srun -n 2 --mpi=pmix --export=ALL,LD_PRELOAD="$LIB" "$BIN/train" --steps 100 --batch 16 \
  --out "$TMP/srun.bin" </dev/null >"$TMP/srun.log" 2>&1 || { cat "$TMP/srun.log"; fail "srun -n 2"; }
same "$TMP/ref.bin" "$TMP/srun.bin" || fail "srun differs from the plain run"
pass "srun -n 2 --mpi=pmix --export=ALL,LD_PRELOAD=...: same result"
# 3. the sbatch script of docs/LAUNCHER.md
cat >"$TMP/job.sh" <<EOF
#!/bin/sh
#SBATCH --ntasks=2
#SBATCH --output=$TMP/sbatch.log
$HVDRUN -np 2 -- $BIN/train --steps 100 --batch 16 --out $TMP/sbatch.bin
EOF
job=$(sbatch --parsable "$TMP/job.sh") || fail "sbatch"
i=0
while squeue -h -j "$job" 2>/dev/null | grep -q .; do
  i=$((i + 1))
  [ $i -le 600 ] || { scancel "$job"; fail "sbatch job $job did not end in 120 s"; }
  sleep 0.2
done
same "$TMP/ref.bin" "$TMP/sbatch.bin" || { cat "$TMP/sbatch.log"; fail "sbatch job differs from the plain run"; }
pass "sbatch (hvdrun -np 2 in the batch script): same result"
