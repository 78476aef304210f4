#!/bin/sh
# The Debian packages as a user installs them (check-stacks' "package"
# stack): built here from this tree (tools/build-deb.sh: make dist's tarball,
# dpkg-buildpackage, lintian clean), then installed with
# `apt-get install ./*.deb` into a chroot of Debian 12 that has never seen
# the source tree (a minimal system with Debian's torch, kept in the stacks'
# cache between runs), where the bundled example runs under `hvdrun` from
# /usr/bin (the library found by hvdrun, no path given), then `hvdshim-info`
# and `man hvdrun`; then the packages are purged and nothing of them may be
# left in the chroot.
#
# Usage: package.sh [--prepare] SRCDIR BUILDDIR CACHE
# Prints "package: N passed, N failed, N skipped" last (check-stacks reads it).
set -u
prepare=0
[ "${1:-}" = --prepare ] && { prepare=1; shift; }
src=$(cd "${1:?usage: package.sh [--prepare] SRCDIR BUILDDIR CACHE}" && pwd)
build=$(cd "${2:?build folder}" && pwd)
cache=${3:?cache folder}
tool="$src/tools/stack-chroot.sh"
root="$cache/bookworm-package"
pass=0 fail=0 skip=0
say() { echo "package: $*"; }
ok() { say "PASS: $*"; pass=$((pass + 1)); }
bad() { say "FAIL: $*"; fail=$((fail + 1)); }
end() { say "$pass passed, $fail failed, $skip skipped"; exit $((fail > 0)); }
why=$(sh "$tool" why-not bookworm)
[ -z "$why" ] || { say "SKIPPED: $why"; skip=1; end; }
# a user's machine: Python, Debian's torch (the example's), man; no compiler, no source
sh "$tool" ensure bookworm "$root" python3 python3-torch python3-numpy libopenblas0-pthread man-db \
  >"$cache/package.chroot.log" 2>&1 || { tail -20 "$cache/package.chroot.log"; bad "could not build the Debian 12 chroot"; end; }
# (the stacks' chroots leave out documentation; a user's system has it)
rm -f "$root/etc/dpkg/dpkg.cfg.d/01-nodoc"
[ $prepare = 1 ] && { say "chroot ready"; exit 0; }
for t in dpkg-buildpackage dh lintian; do
  command -v $t >/dev/null 2>&1 || { say "SKIPPED: $t not found here (apt-get install dpkg-dev debhelper lintian)"; skip=1; end; }
done
# 1. build, lintian clean
debs="$cache/package-debs"
rm -rf "$debs"
if (cd "$build" && sh "$src/tools/build-deb.sh" "$debs") >"$cache/package.build.log" 2>&1; then
  ok "built with dpkg-buildpackage -us -uc, lintian clean: $(cd "$debs" && ls *.deb | tr '\n' ' ')"
else
  tail -30 "$cache/package.build.log" | sed 's/^/  /'
  bad "the packages did not build, or lintian reports errors or warnings (log: $cache/package.build.log)"
  end
fi
# 2. installed into the chroot with apt, as a user would
rm -rf "$root/root/debs" && mkdir -p "$root/root/debs" && cp $(ls "$debs"/*.deb | grep -v -- -dbgsym_) "$root/root/debs/"
run() {
  timeout -k 10 600 chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 TMPDIR=/tmp DEBIAN_FRONTEND=noninteractive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    /bin/sh -c "$1"
}
before=$(run 'dpkg-query -W -f "\${Package}\n" | sort')
if run 'cd /root/debs && apt-get install -y -q ./*.deb' >"$cache/package.install.log" 2>&1; then
  ok "apt-get install ./*.deb into a Debian 12 chroot without the source: $(run 'dpkg-query -W -f "\${Package} \${Version}, " libhvdshim0 hvdshim hvdshim-python libhvdshim-dev')"
else
  tail -20 "$cache/package.install.log" | sed 's/^/  /'
  bad "apt-get install of the packages failed"
  end
fi
# 3. the bundled example under hvdrun from /usr/bin
ex=/usr/share/doc/hvdshim/examples/train.py
if run "d=\$(mktemp -d) && cd \$d && command -v hvdrun && OMP_NUM_THREADS=1 hvdrun -np 2 --oversubscribe python3 $ex --epochs 2 && ls example-checkpoint.pt; st=\$?; cd / && rm -rf \$d; exit \$st" \
  >"$cache/package.example.log" 2>&1 && grep -q '^/usr/bin/hvdrun$' "$cache/package.example.log" &&
  grep -q '^epoch 1 ' "$cache/package.example.log" && grep -q '^saved example-checkpoint.pt' "$cache/package.example.log"; then
  ok "hvdrun -np 2 python3 $ex: trained 2 epochs and saved its checkpoint ($(grep '^epoch 1 ' "$cache/package.example.log"))"
else
  sed 's/^/  /' "$cache/package.example.log" | tail -20
  bad "the bundled example under /usr/bin/hvdrun failed"
fi
if run 'hvdshim-info' >"$cache/package.info.log" 2>&1 && grep -q "library   /usr/lib/.*/libhvdshim.so.0$" "$cache/package.info.log" &&
  grep -q "^  MPI       Open MPI" "$cache/package.info.log"; then
  ok "hvdshim-info: $(grep -m1 '^hvdshim ' "$cache/package.info.log"); $(grep -m1 'library ' "$cache/package.info.log" | sed 's/^ *//')"
else
  sed 's/^/  /' "$cache/package.info.log" | head -20
  bad "hvdshim-info did not find the installed library and MPI"
fi
if run 'MANWIDTH=80 man hvdrun 2>&1 | grep -q "^NAME" && MANWIDTH=80 man 7 hvdshim 2>&1 | grep -q HVDSHIM_FUSION_THRESHOLD'; then
  ok "man hvdrun and man 7 hvdshim (with the settings) read from the installed pages"
else
  bad "man hvdrun or man 7 hvdshim not found after the install"
fi
# 4. purged: the chroot as it was.  apt's autoremove may keep a
# dependency that a package still installed recommends or suggests (a fresh
# chroot kept ibverbs-providers, libhwloc-plugins and libxnvctrl0): such
# leftovers must be packages apt installed automatically (none of ours, none
# installed by hand); they are then purged so that the cached chroot is as
# it was for the next run
run 'apt-get purge -y -q libhvdshim0 libhvdshim-dev hvdshim hvdshim-python && apt-get autoremove --purge -y -q' \
  >"$cache/package.purge.log" 2>&1
after=$(run 'dpkg-query -W -f "\${Package}\n" | sort')
extra=$(echo "$after" | grep -v -x -F "$before")
auto=$(run 'apt-mark showauto')
notauto=$(for p in $extra; do echo "$auto" | grep -q -x -F "$p" || echo "$p"; done)
[ -n "$extra" ] && run "apt-get purge -y -q $(echo $extra)" >>"$cache/package.purge.log" 2>&1
again=$(run 'dpkg-query -W -f "\${Package}\n" | sort')
left=$(run 'ls -d /usr/share/hvdshim /usr/lib/*/libhvdshim* /usr/bin/hvdrun /usr/share/doc/hvdshim 2>/dev/null')
rm -rf "$root/root/debs"
if [ -z "$notauto" ] && [ "$before" = "$again" ] && [ -z "$left" ]; then
  ok "purged: no file of hvdshim left, the same packages as before the install${extra:+ (after purging $(echo $extra), dependencies apt kept as recommended)}"
else
  bad "after the purge: packages not installed as dependencies: $(echo $notauto), left: $(echo "$again" | grep -v -x -F "$before" | tr '\n' ' '), files $left"
fi
end
