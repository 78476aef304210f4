#!/bin/sh
# stack-chroot.sh: a Debian chroot holding one software stack (a Debian suite's
# Python, torch and MPI), for `make check-stacks`.
#
#   stack-chroot.sh ensure SUITE DIR PACKAGE...   debootstrap SUITE into DIR unless DIR
#                                                 already holds a system, mount the pseudo
#                                                 file systems, install the PACKAGEs missing
#   stack-chroot.sh mount DIR                     mount /proc /sys /dev /dev/pts /dev/shm
#   stack-chroot.sh umount DIR                    unmount everything under DIR (deepest first)
#   stack-chroot.sh run DIR COMMAND...            mount, then chroot DIR COMMAND...
#   stack-chroot.sh why-not [SUITE]               print why chroots (of SUITE) cannot be built
#                                                 here: not root, no archive (nothing when they can)
#
# The archive is the host's own (the first non-security URI of its apt
# sources) unless STACK_MIRROR names one.  A frozen archive copy's Release
# files may be past their Valid-Until, so that check is turned off inside
# (signatures are still checked).  Needs root; installs debootstrap on the
# host when it is missing.
set -eu

die() { echo "stack-chroot.sh: $*" >&2; exit 1; }
say() { echo "stack-chroot: $*"; }

mirror() {
  [ -n "${STACK_MIRROR:-}" ] && { echo "$STACK_MIRROR"; return; }
  { sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n'
    sed -n 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\).*/\2/p' \
      /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
  } | grep -v -e '-security' -e '^$' | head -n 1
}

mounted() { mountpoint -q "$1" 2>/dev/null; }

do_mount() {
  d=$1
  [ -x "$d/usr/bin/apt-get" ] || die "$d holds no Debian system"
  mkdir -p "$d/proc" "$d/sys" "$d/dev" "$d/tmp"
  mounted "$d/proc" || mount -t proc proc "$d/proc"
  mounted "$d/sys" || { mount --rbind /sys "$d/sys" && mount --make-rslave "$d/sys"; }
  mounted "$d/dev" || { mount --bind /dev "$d/dev" && mount --make-slave "$d/dev"; }
  mkdir -p "$d/dev/pts" "$d/dev/shm"
  mounted "$d/dev/pts" || { mount --bind /dev/pts "$d/dev/pts" && mount --make-slave "$d/dev/pts"; }
  # the chroot's own shared memory (Open MPI's and MPICH's on-node transports)
  mounted "$d/dev/shm" || mount -t tmpfs -o mode=1777,size=50% shm "$d/dev/shm"
  chmod 1777 "$d/tmp"
  [ -f /etc/resolv.conf ] && cp -L /etc/resolv.conf "$d/etc/resolv.conf" 2>/dev/null || true
}

do_umount() {
  [ -d "$1" ] || return 0
  d=$(cd "$1" && pwd -P)
  for p in $(awk -v d="$d" 'index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r | uniq); do
    umount "$p" 2>/dev/null || umount -l "$p" || echo "stack-chroot.sh: could not unmount $p" >&2
  done
}

why_not() {
  [ "$(id -u)" = 0 ] || { echo "not root (debootstrap and chroot need root)"; return; }
  m=$(mirror)
  [ -n "$m" ] || { echo "no Debian archive in the host's apt sources (set STACK_MIRROR)"; return; }
  command -v chroot >/dev/null 2>&1 || { echo "no chroot command"; return; }
  [ $# -ge 1 ] || return 0
  for py in /usr/bin/python3 python3; do # probe the suite (debootstrap would fail later, less clearly)
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20).read(1)' \
      "$m/dists/$1/Release" 2>/dev/null || echo "the Debian archive has no $1 here ($m/dists/$1/Release unreachable)"
    return
  done
}

ensure() {
  suite=$1 d=$2
  shift 2
  mkdir -p "$d"
  d=$(cd "$d" && pwd -P)
  t0=$(date +%s)
  if [ ! -x "$d/usr/bin/apt-get" ]; then
    m=$(mirror)
    [ -n "$m" ] || die "no Debian archive in the host's apt sources (set STACK_MIRROR)"
    if ! command -v debootstrap >/dev/null 2>&1; then
      say "installing debootstrap on the host"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    script=
    [ -e "/usr/share/debootstrap/scripts/$suite" ] || script=/usr/share/debootstrap/scripts/sid
    say "debootstrap $suite into $d from $m"
    # shellcheck disable=SC2086
    debootstrap --variant=minbase --include=ca-certificates "$suite" "$d" "$m" $script >"$d.debootstrap.log" 2>&1 ||
      { tail -20 "$d.debootstrap.log" >&2; do_umount "$d"; rm -rf --one-file-system "$d"; die "debootstrap $suite failed (log above)"; }
    printf '#!/bin/sh\nexit 101\n' >"$d/usr/sbin/policy-rc.d" # no daemons start inside
    chmod +x "$d/usr/sbin/policy-rc.d"
    printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-exclude /usr/share/man/*' 'path-exclude /usr/share/locale/*' \
      >"$d/etc/dpkg/dpkg.cfg.d/01-nodoc"
    echo 'APT::Install-Recommends "false"; APT::Install-Suggests "false";' >"$d/etc/apt/apt.conf.d/01-norecommends"
  fi
  echo 'Acquire::Check-Valid-Until "false";' >"$d/etc/apt/apt.conf.d/02-no-valid-until"
  do_mount "$d"
  missing=
  for p in "$@"; do
    chroot "$d" dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    say "installing in $suite:$missing"
    chroot "$d" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get update -qq
    # shellcheck disable=SC2086
    chroot "$d" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get install -y -qq $missing >"$d.apt.log" 2>&1 ||
      { tail -20 "$d.apt.log" >&2; die "apt-get install in $suite failed (log above)"; }
    chroot "$d" apt-get clean
  fi
  say "$suite ready in $d ($(($(date +%s) - t0)) s, $(du -sxh "$d" 2>/dev/null | cut -f1))"
}

[ $# -ge 1 ] || die "usage: stack-chroot.sh ensure|mount|umount|run|why-not ..."
cmd=$1
shift
case $cmd in
  why-not) why_not "$@" ;;
  ensure) [ $# -ge 2 ] || die "usage: ensure SUITE DIR PACKAGE..."; ensure "$@" ;;
  mount) [ $# -eq 1 ] || die "usage: mount DIR"; do_mount "$1" ;;
  umount) [ $# -eq 1 ] || die "usage: umount DIR"; do_umount "$1" ;;
  run) [ $# -ge 2 ] || die "usage: run DIR COMMAND..."; d=$1; shift; do_mount "$d"; exec chroot "$d" "$@" ;;
  *) die "unknown command '$cmd' (ensure, mount, umount, run, why-not)" ;;
esac
