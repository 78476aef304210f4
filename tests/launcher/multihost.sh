#!/bin/sh
# hvdrun across several hosts on one machine: two network namespaces joined
# by a veth pair stand for two hosts (10.77.R.1 and 10.77.R.2).  hvdrun runs
# in the first with -H (the first host by its name: Open MPI 5.0's mapper
# gives the local host one slot when -H names it by an address); mpirun
# starts the second host's daemon through a launch agent that enters that
# namespace with an empty environment (as ssh would give a fresh login), so
# LD_PRELOAD and the HVDSHIM_* settings reach the remote rank only if hvdrun
# forwards them.  The native example at 2 ranks (one per host, TCP over the
# veth) must match the plain trainer with a 2x batch, and both ranks must
# report their own host.  Then 2 ranks per host (shared memory within a
# host, MPI between) against a 4x batch.  Runs in the stacks' chroots too
# (Open MPI 5 and 6): namespaces are entered with nsenter.
# Skips, with the reason, where namespaces cannot be made (not root, no
# iproute2, a container without CAP_SYS_ADMIN).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_open_mpi "the launch agent (plm_rsh_agent) and TCP settings"
IP=$(command -v ip || true)
[ -n "$IP" ] || skip "ip (iproute2) not found: apt-get install iproute2"
[ "$(id -u)" = 0 ] || skip "network namespaces need root (ip netns add)"
HVDRUN="$top_builddir/launcher/hvdrun"
[ -x "$HVDRUN" ] || fail "launcher/hvdrun not built"
A=hvdA$$ B=hvdB$$
sub=$((($$ % 200) + 20))
cleanup() {
  "$IP" netns del $A 2>/dev/null || true
  "$IP" netns del $B 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
"$IP" netns add $A 2>"$TMP/ns.err" || skip "cannot create a network namespace: $(head -1 "$TMP/ns.err")"
"$IP" netns add $B || fail "second namespace"
# ns_enter NS: the command that runs what follows it in namespace NS.
# nsenter joins only the network namespace; `ip netns exec` (and `ip -n`)
# also remounts / and /sys, which fails inside a chroot, where / is no mount
# point (the stacks' chroots)
NSDIR=/run/netns
[ -e $NSDIR/$A ] || NSDIR=/var/run/netns
NSENTER=$(command -v nsenter || true)
if [ -n "$NSENTER" ]; then NS_PREFIX="$NSENTER --net=$NSDIR/"; else NS_PREFIX="$IP netns exec "; fi
ns_enter() { echo "$NS_PREFIX$1"; }
in_ns() { # NS COMMAND...
  _ns=$1
  shift
  $(ns_enter "$_ns") "$@"
}
in_ns $A "$IP" link set lo up 2>"$TMP/ns.err" || skip "cannot enter a network namespace here: $(head -1 "$TMP/ns.err")"
"$IP" link add vA$$ type veth peer name vB$$ || skip "cannot create a veth pair (no veth support in this kernel?)"
"$IP" link set vA$$ netns $A && "$IP" link set vB$$ netns $B || fail "moving the veth ends"
in_ns $A "$IP" addr add 10.77.$sub.1/24 dev vA$$ && in_ns $B "$IP" addr add 10.77.$sub.2/24 dev vB$$ || fail "addresses"
for ns in $A $B; do in_ns $ns "$IP" link set lo up; done
in_ns $A "$IP" link set vA$$ up && in_ns $B "$IP" link set vB$$ up || fail "links up"
in_ns $A ping -c 1 -W 2 10.77.$sub.2 >/dev/null 2>&1 || echo "(ping unavailable or failed; going on)"

# The launch agent: called as AGENT HOST COMMAND...; enters HOST's namespace
# with only PATH and HOME set (Open MPI 6 fails without a HOME), and runs
# the command through a shell (as sshd would).
# Each "host" also gets its own host name (a UTS namespace): Open MPI tells
# nodes apart by name, and two daemons on one name crash it at 2 ranks each.
cat >"$TMP/agent" <<AGENTEOF
#!/bin/sh
host=\$1
shift
echo "\$host" >>"$TMP/agent.calls"
while [ "\${1#-}" != "\$1" ]; do shift; done  # options meant for ssh, if any
case \$host in
  10.77.$sub.1) ns=$A ;;
  10.77.$sub.2) ns=$B ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="${HOME:-/}" $NS_PREFIX\$ns unshare --uts /bin/sh -c "hostname \$ns; \$*"
AGENTEOF
chmod +x "$TMP/agent"

. "$top_srcdir/tests/native/native-lib.sh"
build_lib "$BIN"
build_train "$BIN" train
"$BIN/train" --steps 100 --batch 32 --out "$TMP/ref.bin" >"$TMP/ref.log" || fail "plain run"
# mpirun's own settings, for the ranks' TCP and the launch: through its
# OMPI_MCA_* environment, as a user's site configuration would
export OMPI_MCA_plm_rsh_agent="$TMP/agent" PRTE_MCA_plm_ssh_agent="$TMP/agent" OMPI_MCA_btl=self,tcp \
  OMPI_MCA_btl_tcp_if_include=10.77.$sub.0/24 OMPI_MCA_oob_tcp_if_include=10.77.$sub.0/24
HVDSHIM_HOOKS="$EX/mlp.hooks" HVDSHIM_LOG_LEVEL=info timeout -k 5 120 $(ns_enter $A) unshare --uts sh -c 'hostname '$A'; exec "$@"' sh \
  "$HVDRUN" --verbose -np 2 -H $A:1,10.77.$sub.2:1 -- "$BIN/train" --steps 100 --batch 16 --out "$TMP/np2.bin" \
  </dev/null >"$TMP/np2.log" 2>&1 || { cat "$TMP/np2.log"; fail "hvdrun across two namespaces"; }
grep "^hvdrun: " "$TMP/np2.log" | head -1
[ "$(cat "$TMP/agent.calls" 2>/dev/null)" = "10.77.$sub.2" ] ||
  { cat "$TMP/np2.log"; fail "the launch agent was not called (only) for the second host: $(cat "$TMP/agent.calls" 2>/dev/null)"; }
grep -q "hvdshim\[1\]: .*engine started: 2 rank(s)" "$TMP/np2.log" ||
  { cat "$TMP/np2.log"; fail "rank 1 (the other host) did not start the engine: settings not forwarded?"; }
same "$TMP/ref.bin" "$TMP/np2.bin" || fail "2 hosts differ from the plain run with batch 32"
pass "2 hosts (network namespaces, TCP over veth, launch agent with an empty environment): matches the plain run"

# 2 ranks on each host: the shared-memory allreduce within a host and MPI
# (TCP) between the hosts, one allreduce per slice (the hierarchical path)
HVDSHIM_HOOKS="$EX/mlp.hooks" HVDSHIM_LOG_LEVEL=info timeout -k 5 180 $(ns_enter $A) unshare --uts sh -c 'hostname '$A'; exec "$@"' sh \
  "$HVDRUN" --verbose -np 4 -H $A:2,10.77.$sub.2:2 -- "$BIN/train" --steps 100 --batch 8 --out "$TMP/np4.bin" \
  </dev/null >"$TMP/np4.log" 2>&1 || { cat "$TMP/np4.log"; fail "hvdrun with 2 ranks on each of two namespaces"; }
grep -q "hvdshim\[0\]: .*shared memory 2 rank(s) per host x 2 host(s)" "$TMP/np4.log" ||
  { cat "$TMP/np4.log"; fail "2 x 2: the shared-memory path across hosts was not used"; }
same "$TMP/ref.bin" "$TMP/np4.bin" || fail "2 hosts x 2 ranks differ from the plain run with batch 32"
pass "2 hosts x 2 ranks: shared memory within each, MPI between them: matches the plain run"
