#!/bin/sh
# Command one of the README: install what hvdshim needs from Debian, build
# it, and run the bundled example (an ordinary PyTorch script) on 2 ranks
# under the shim.  Run from the source tree, as
# root or with sudo available.  Set BOOTSTRAP_SKIP_DEMO=1 to only build.
set -eu
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
PKGS="build-essential autoconf automake libtool pkg-config openmpi-bin libopenmpi-dev libffi-dev
python3 python3-numpy python3-torch libpython3-dev libopenblas0-pthread procps binutils
clang libclang-rt-14-dev valgrind iproute2 python3-matplotlib
python3-pytest python3-mock python3-cloudpickle python3-packaging"
echo "bootstrap: installing: $(echo $PKGS)"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
echo "bootstrap: building"
./autogen.sh >/dev/null 2>&1
./configure --quiet
make -j"$(nproc)" >/dev/null
make -j"$(nproc)" examples/engine_demo >/dev/null
[ "${BOOTSTRAP_SKIP_DEMO:-0}" = 1 ] && exit 0
echo "bootstrap: running the example: launcher/hvdrun -np 2 -- /usr/bin/python3 examples/train.py"
cd "$(mktemp -d)" # the example writes its checkpoint to the current directory
"$OLDPWD/launcher/hvdrun" --oversubscribe -np 2 -- /usr/bin/python3 "$OLDPWD/examples/train.py" </dev/null
echo "bootstrap: the example's checkpoint (written by rank 0 alone): $PWD/example-checkpoint.pt"
