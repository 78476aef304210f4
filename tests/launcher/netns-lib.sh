# Sourced by tests/launcher/*.sh after tests/lib.sh: two hosts on one
# machine.  Two network namespaces joined by a veth pair stand for two hosts
# (10.77.S.1 and 10.77.S.2, S from this shell's pid); a launch agent enters
# the second with an empty environment (as ssh would give a fresh login) and
# its own host name (a UTS namespace: Open MPI tells nodes apart by name, and
# two daemons on one name crash it at 2 ranks each).  Namespaces are entered
# with nsenter, which joins only the network namespace: `ip netns exec`
# (and `ip -n`) also remounts / and /sys, which fails inside a chroot, where
# / is no mount point (the stacks' chroots).  Skips, with the reason, where
# namespaces cannot be made (not root, no iproute2, a container without
# CAP_SYS_ADMIN).  After netns_up:
#   $A $B            the namespaces (also the hosts' names), $VA $VB their ends
#   $IPA $IPB        their addresses
#   in_ns NS CMD...  CMD in namespace NS
#   $ON_A CMD...     (a program) CMD on the first host (its network and host
#                    name), as a user's shell there: hvdrun runs so
#   OMPI_MCA_*       exported: the launch agent, the ranks' TCP on the veth
# cut_link / heal_link: the second host's end down / up (its processes live
# on; the first host's end loses its carrier too).
IP=$(command -v ip || true)
[ -n "$IP" ] || skip "ip (iproute2) not found: apt-get install iproute2"
[ "$(id -u)" = 0 ] || skip "network namespaces need root (ip netns add)"
HVDRUN="$top_builddir/launcher/hvdrun"
[ -x "$HVDRUN" ] || fail "launcher/hvdrun not built"
A=hvdA$$ B=hvdB$$ VA=vA$$ VB=vB$$
sub=$((($$ % 200) + 20))
IPA=10.77.$sub.1 IPB=10.77.$sub.2

netns_down() { # (what a failed test left in them first)
  [ -n "${WIRE_PID-}" ] && kill $WIRE_PID 2>/dev/null
  for _p in $("$IP" netns pids $A 2>/dev/null) $("$IP" netns pids $B 2>/dev/null); do kill -9 $_p 2>/dev/null; done
  "$IP" netns del $A 2>/dev/null || true
  "$IP" netns del $B 2>/dev/null || true
}
# (lib.sh's EXIT trap, then the namespaces)
trap 'netns_down; [ -n "${WARM_PID-}" ] && { pkill -P "$WARM_PID"; kill "$WARM_PID"; } 2>/dev/null; rm -rf "$TMP"' EXIT

in_ns() { # NS COMMAND...
  _ns=$1
  shift
  $NS_PREFIX$_ns "$@"
}
cut_link() { in_ns $B "$IP" link set $VB down; }
heal_link() { in_ns $B "$IP" link set $VB up; }

netns_up() { # (a veth pair between them)
  netns_make
  "$IP" link add $VA type veth peer name $VB || skip "cannot create a veth pair (no veth support in this kernel?)"
  "$IP" link set $VA netns $A && "$IP" link set $VB netns $B || fail "moving the veth ends"
  in_ns $A "$IP" addr add $IPA/24 dev $VA && in_ns $B "$IP" addr add $IPB/24 dev $VB || fail "addresses"
  in_ns $A "$IP" link set $VA up && in_ns $B "$IP" link set $VB up || fail "links up"
  in_ns $A ping -c 1 -W 2 $IPB >/dev/null 2>&1 || echo "(ping unavailable or failed; going on)"
  netns_agent
}

netns_make() {
  "$IP" netns add $A 2>"$TMP/ns.err" || skip "cannot create a network namespace: $(head -1 "$TMP/ns.err")"
  "$IP" netns add $B || fail "second namespace"
  NSDIR=/run/netns
  [ -e $NSDIR/$A ] || NSDIR=/var/run/netns
  NSENTER=$(command -v nsenter || true)
  if [ -n "$NSENTER" ]; then NS_PREFIX="$NSENTER --net=$NSDIR/"; else NS_PREFIX="$IP netns exec "; fi
  in_ns $A "$IP" link set lo up 2>"$TMP/ns.err" || skip "cannot enter a network namespace here: $(head -1 "$TMP/ns.err")"
  in_ns $B "$IP" link set lo up
}

netns_agent() {
  # The launch agent: called as AGENT HOST COMMAND...; enters HOST's
  # namespace with only PATH and HOME set (Open MPI 6 fails without a
  # HOME), and runs the command through a shell (as sshd would).
  cat >"$TMP/agent" <<AGENTEOF
#!/bin/sh
host=\$1
shift
echo "\$host" >>"$TMP/agent.calls"
while [ "\${1#-}" != "\$1" ]; do shift; done  # options meant for ssh, if any
case \$host in
  $IPA) ns=$A ;;
  $IPB) ns=$B ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="${HOME:-/}" $NS_PREFIX\$ns unshare --uts /bin/sh -c "hostname \$ns; \$*"
AGENTEOF
  chmod +x "$TMP/agent"
  printf '#!/bin/sh\nexec %s%s unshare --uts sh -c %s sh "$@"\n' "$NS_PREFIX" $A "'hostname $A; exec \"\$@\"'" >"$TMP/on-a"
  chmod +x "$TMP/on-a"
  ON_A=$TMP/on-a
  # mpirun's own settings, for the ranks' TCP and the launch: through its
  # OMPI_MCA_* environment, as a user's site configuration would
  export OMPI_MCA_plm_rsh_agent="$TMP/agent" PRTE_MCA_plm_ssh_agent="$TMP/agent" OMPI_MCA_btl=self,tcp \
    OMPI_MCA_btl_tcp_if_include=10.77.$sub.0/24 OMPI_MCA_oob_tcp_if_include=10.77.$sub.0/24
}

# impaired_up DELAY_MS LOSS_PERCENT: the namespaces joined by a link that
# delays every packet DELAY_MS each way and drops LOSS_PERCENT of them:
# `tc qdisc ... netem` on a veth pair where the kernel has sch_netem, else
# tests/launcher/wire.c between two TUN devices ($WIRE: it built; says
# which in $LINK_KIND).  impaired_set DELAY LOSS changes it.
impaired_up() {
  netns_make
  "$IP" link add $VA type veth peer name $VB || skip "cannot create a veth pair (no veth support in this kernel?)"
  "$IP" link set $VA netns $A && "$IP" link set $VB netns $B || fail "moving the veth ends"
  if in_ns $A tc qdisc add dev $VA root netem delay 0ms 2>"$TMP/netem.err"; then
    LINK_KIND="tc netem (veth)"
    in_ns $B tc qdisc add dev $VB root netem delay 0ms || fail "netem on the second end"
    in_ns $A "$IP" addr add $IPA/24 dev $VA && in_ns $B "$IP" addr add $IPB/24 dev $VB || fail "addresses"
    in_ns $A "$IP" link set $VA up && in_ns $B "$IP" link set $VB up || fail "links up"
  else
    LINK_KIND="wire.c (TUN; no netem in this kernel: $(head -1 "$TMP/netem.err"))"
    in_ns $A "$IP" link del $VA
    WIRE_PID=
  fi
  netns_agent
  impaired_set "$1" "$2"
}
impaired_set() {
  case $LINK_KIND in
    tc*)
      in_ns $A tc qdisc change dev $VA root netem delay "$1"ms loss "$2"% && in_ns $B tc qdisc change dev $VB root netem delay "$1"ms loss "$2"% ||
        fail "tc qdisc change netem delay $1ms loss $2%"
      ;;
    *)
      [ -n "$WIRE_PID" ] && { kill $WIRE_PID; wait $WIRE_PID 2>/dev/null; }
      # (the last wire's "ready" gone first: the background child truncates
      # the file only when it runs, and the wait below must see this one's)
      rm -f "$TMP/wire.out"
      "$WIRE" $NSDIR/$A $VA $NSDIR/$B $VB "$1" "$2" >"$TMP/wire.out" 2>"$TMP/wire.err" &
      WIRE_PID=$!
      _i=0
      until grep -q ready "$TMP/wire.out" 2>/dev/null; do
        _i=$((_i + 1))
        [ $_i -le 50 ] && kill -0 $WIRE_PID 2>/dev/null || { cat "$TMP/wire.err"; skip "cannot make TUN devices: $(head -1 "$TMP/wire.err")"; }
        sleep 0.1
      done
      in_ns $A "$IP" addr add $IPA peer $IPB dev $VA && in_ns $B "$IP" addr add $IPB peer $IPA dev $VB || fail "addresses"
      in_ns $A "$IP" link set $VA up && in_ns $B "$IP" link set $VB up || fail "links up"
      ;;
  esac
}

# ns_pids NS: the processes in namespace NS (their network namespace's inode)
ns_pids() {
  "$IP" netns pids "$1" 2>/dev/null
}
