#!/bin/sh
# One pytest-xdist worker of `bash dev.sh test`, on a machine of its own as far as the suite's
# leftover checks can tell: a private mount namespace with its own /dev/shm (a fresh tmpfs) and its
# own temp dir. The engine tests of two workers then run side by side, and each one's "nothing left
# in /dev/shm or the temp dir" check sees exactly what its own engines made — not the other
# worker's — so no assertion is loosened by running them in parallel.
#
# xdist starts this as `worker.sh -c <bootstrap>` (--tx popen//python=tests/worker.sh); the real
# interpreter is PPSPEC_WORKER_PYTHON (dev.sh sets it to .venv/bin/python). Needs root (the suite
# needs it anyway: network namespaces, mknod); dev.sh falls back to one serial run without it.
set -eu
: "${PPSPEC_WORKER_PYTHON:?set by dev.sh: the interpreter the worker runs}"
export PPSPEC_TEST_ISOLATED=1
exec unshare --mount --propagation private -- sh -c '
    set -eu
    mount -t tmpfs -o mode=1777 tmpfs /dev/shm
    TMPDIR=$(mktemp -d /tmp/ppspec-worker.XXXXXX)
    export TMPDIR
    rc=0
    "$PPSPEC_WORKER_PYTHON" "$@" || rc=$?
    rm -rf "$TMPDIR"
    exit "$rc"
' worker "$@"
