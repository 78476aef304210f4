#!/bin/sh
# Command one of the README: install what hvdshim needs from Debian, build
# it, and run the bundled demo on 2 ranks.  Run from the source tree, as
# root or with sudo available.  Set HVDSHIM_SKIP_DEMO=1 to only build.
set -eu
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
PKGS="build-essential autoconf automake libtool pkg-config openmpi-bin libopenmpi-dev libffi-dev
python3 python3-numpy python3-torch libopenblas0-pthread procps binutils"
echo "bootstrap: installing: $(echo $PKGS)"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
echo "bootstrap: building"
./autogen.sh >/dev/null 2>&1
./configure --quiet
make -j"$(nproc)" >/dev/null
make -j"$(nproc)" examples/engine_demo >/dev/null
[ "${HVDSHIM_SKIP_DEMO:-0}" = 1 ] && exit 0
echo "bootstrap: running the demo: mpirun -np 2 examples/engine_demo"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe -np 2 examples/engine_demo </dev/null
