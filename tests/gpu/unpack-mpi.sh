#!/bin/sh
# Puts Debian's Open MPI on a machine that has none (a lent GPU machine whose
# image has no MPI and no network), from .deb files carried beside it:
#
#   tests/gpu/unpack-mpi.sh DIR      (DIR holds the .deb files)
#
# On a Debian 12 machine: in DIR, `apt-get download openmpi-bin
# openmpi-common libopenmpi3 libopenmpi-dev` and the libraries they load
# (libpmix2 libhwloc15 libhwloc-plugins libevent-2.1-7 libevent-core-2.1-7
# libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 ibverbs-providers
# librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200
# libnuma1 libmunge2 libltdl7 libatomic1 libxnvctrl0).  Each is unpacked
# into one folder that is copied over / without replacing a file already
# there (the machine's own newer libraries stay), then the links that
# Debian's alternatives would make (mpirun, mpiexec, mpicc).
set -e
dir=${1:?usage: unpack-mpi.sh DIR-of-debs}
tmp=$(mktemp -d)
for f in "$dir"/*.deb; do dpkg -x "$f" "$tmp"; done
# a merged /usr (/lib a link to usr/lib): a package's /lib files go under usr/
for d in lib lib64 bin sbin; do
  if [ -L "/$d" ] && [ -d "$tmp/$d" ] && [ ! -L "$tmp/$d" ]; then
    mkdir -p "$tmp/usr/$d" && cp -a "$tmp/$d"/. "$tmp/usr/$d"/ && rm -rf "${tmp:?}/$d"
  fi
done
cp -an "$tmp"/. / 2>/dev/null || true # dangling links in doc folders are refused: harmless
rm -rf "$tmp"
for l in mpirun:mpirun.openmpi mpiexec:mpiexec.openmpi mpicc:mpicc.openmpi; do
  [ -e "/usr/bin/${l%%:*}" ] || ln -s "${l#*:}" "/usr/bin/${l%%:*}"
done
[ -e /usr/include/x86_64-linux-gnu/mpi ] || ln -s /usr/lib/x86_64-linux-gnu/openmpi/include /usr/include/x86_64-linux-gnu/mpi
ldconfig
mpirun --version | head -1
