#!/bin/sh
# run-in.sh: one command on one of check-stacks' Debian stacks, for working on
# a failure there without running a whole stack:
#
#   tests/stacks/run-in.sh STACK 'COMMAND'     (from anywhere; STACK: trixie,
#                                               trixie-mpich or sid)
#
# Copies this source tree (as git knows it: tracked and untracked files not
# ignored, their times kept) into the stack's chroot at /root/dev-NAME (NAME:
# this tree's folder name), configures it there the way check-stacks does on
# the first call, makes it, then runs COMMAND in it with the stack's Python
# and MPI, e.g.
#
#   tests/stacks/run-in.sh sid 'make check TESTS=tests/mpi/elastic.sh; cat tests/mpi/elastic.log'
#
# The chroot must exist (make check-stacks, or check-stacks.sh --prepare);
# HVDCHECK_STACKS_CACHE says where (default: the stacks-cache folder of this
# tree, else of the tree the first git worktree is in).  The pseudo file
# systems are mounted and left mounted (check-stacks unmounts them when it
# ends).  The exit status is COMMAND's.
set -u
name=${1:?usage: run-in.sh STACK COMMAND}
cmd=${2:?usage: run-in.sh STACK COMMAND}
src=$(cd "$(dirname "$0")/../.." && pwd)
cache=${HVDCHECK_STACKS_CACHE:-}
if [ -z "$cache" ]; then
  cache=$src/stacks-cache
  main=$(git -C "$src" worktree list --porcelain 2>/dev/null | sed -n '1s/^worktree //p')
  [ -d "$cache" ] || [ -z "$main" ] || cache=$main/stacks-cache
fi
case $name in
  trixie) suite=trixie mpicc=mpicc.openmpi ;;
  trixie-mpich) suite=trixie mpicc=mpicc.mpich ;;
  sid) suite=sid mpicc=mpicc.openmpi ;;
  *) echo "run-in.sh: unknown stack $name (trixie, trixie-mpich, sid)" >&2; exit 2 ;;
esac
root=$cache/$suite
[ -x "$root/usr/bin/python3" ] || { echo "run-in.sh: no $suite chroot at $root (make check-stacks first)" >&2; exit 2; }
sh "$src/tools/stack-chroot.sh" mount "$root" || exit 2
dir=/root/dev-$(basename "$src")-$name
mkdir -p "$root$dir"
(cd "$src" && { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 tar cf -) | tar xf - -C "$root$dir" ||
  { echo "run-in.sh: could not copy the sources into $root$dir" >&2; exit 2; }
cuda=
if [ "$suite" = sid ] && [ -f "${CUDA_HOME:-/usr/local/cuda}/include/nccl.h" ] && [ ! -d "$root/root/cuda-dev" ]; then
  mkdir -p "$root/root/cuda-dev" && cp -rL "${CUDA_HOME:-/usr/local/cuda}/include" "$root/root/cuda-dev/"
fi
[ "$suite" = sid ] && [ -d "$root/root/cuda-dev" ] && cuda="--with-cuda=/root/cuda-dev"
ref=reference/horovod-0.28.1/tests
if [ -d "$src/../shared/$ref" ] && [ ! -d "$root/root/shared/$ref" ]; then
  mkdir -p "$root/root/shared/$ref" && cp "$src/../shared/$ref/"*.py "$root/root/shared/$ref/"
fi
chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  TMPDIR=/tmp CI="${CI:-}" /bin/sh -c "cd $dir && { [ -f Makefile ] || { ./autogen.sh && ./configure -q PYTHON=/usr/bin/python3 --with-mpi=$mpicc $cuda NVCC=no; } >/dev/null; } && make -s -j\$(nproc) >/dev/null && $cmd"
