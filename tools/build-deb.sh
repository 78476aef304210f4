#!/bin/sh
# build-deb.sh [OUTDIR]: the Debian packages of this tree, as Debian builds
# them.  Run from a configured build tree (make dist needs it).  The tarball
# of `make dist` is the upstream source (OUTDIR/hvdshim_VERSION.orig.tar.gz),
# debian/ is added to its unpacked copy, `dpkg-buildpackage -us -uc` builds
# the source package (3.0 (quilt)) and the binary ones (libhvdshim0,
# libhvdshim-dev, hvdshim, hvdshim-python), and lintian checks them; its
# E: and W: lines fail the build.  OUTDIR (default ./deb) gets the
# packages and build.log.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-deb}" && cd "${1:-deb}" && pwd)
for t in dpkg-buildpackage dh lintian; do
  command -v $t >/dev/null 2>&1 || { echo "build-deb: $t not found (apt-get install dpkg-dev debhelper lintian)" >&2; exit 2; }
done
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"/\1/p' config.h 2>/dev/null)
[ -n "$version" ] || { echo "build-deb: run from a configured build tree (./configure first)" >&2; exit 2; }
make -s dist >"$out/dist.log" 2>&1 || { tail -20 "$out/dist.log"; echo "build-deb: make dist failed" >&2; exit 1; }
rm -rf "$out/hvdshim-$version" "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo "$out"/*.dsc "$out"/*.debian.tar.* "$out"/*.orig.tar.*
mv "hvdshim-$version.tar.gz" "$out/hvdshim_$version.orig.tar.gz"
tar xzf "$out/hvdshim_$version.orig.tar.gz" -C "$out"
rm -rf "$out/hvdshim-$version/debian"
cp -r "$src/debian" "$out/hvdshim-$version/debian"
(cd "$out/hvdshim-$version" && dpkg-buildpackage -us -uc) >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; echo "build-deb: dpkg-buildpackage failed (log: $out/build.log)" >&2; exit 1; }
changes=$(ls "$out"/hvdshim_"$version"-*_*.changes)
lintian --info --display-info "$changes" >"$out/lintian.log" 2>&1 || true
cat "$out/lintian.log"
if grep -q '^[EW]: ' "$out/lintian.log"; then
  echo "build-deb: lintian reports errors or warnings" >&2
  exit 1
fi
ls "$out"/*.deb
