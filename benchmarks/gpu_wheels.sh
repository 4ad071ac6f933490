#!/usr/bin/env bash
# Assemble the wheels the GPU validation (benchmarks/gpu_pp_validation.py) needs on a device
# machine that reaches no package registry, split them into parts that fit one device call, and
# reassemble + install them there into /tmp/site.
#
# Here (a machine with pip access; run from the repo root):
#   bash benchmarks/gpu_wheels.sh plan     [--tier lean|minimal|full] [--device-pip-list FILE] [--override NAME==VER]...
#   bash benchmarks/gpu_wheels.sh prepare  [--tier ...] [--device-pip-list FILE] [--override NAME==VER]...
#   bash benchmarks/gpu_wheels.sh calls    # the device calls to make, one JSON object per line
# On the device (inside those calls):
#   bash benchmarks/gpu_wheels.sh receive PART      # keep one part in /tmp/wheelparts, check it
#   bash benchmarks/gpu_wheels.sh install           # reassemble, check, pip install --target /tmp/site
#
# Why: vLLM >= 0.30 (EAGLE3 under PP) pins torch 2.13/2.14; the device image has torch 2.11, no
# vLLM and no registry access. The wheels travel in parts of at most PART_MIB (default 60) MiB:
# a device call carries at most 64 MiB including the repo. Files stay on a warm machine between
# calls (and it is given back 30 s after a call, 30 min after the first at the latest), so the
# calls must follow each other quickly; see docs/gpu-validation.md for the measured sizes.
#
# Tiers (what to carry besides vLLM itself):
#   full     every wheel of the resolved set whose version the device does not already have
#            (torch 2.14 pins its CUDA 13 libraries exactly: cuDNN, cuBLAS, NCCL, ...)
#   minimal  as full, but trust the device's CUDA 13 libraries (nvidia-*, cuda-*) whatever their
#            version: torch 2.14 is built for CUDA 13.0, the device has CUDA 13 libraries
#   lean     as minimal, and leave out kernel packages a tiny float32 run does not import
#            (LEAN_SKIP below: cutlass-dsl libs, tilelang, tokenspeed, video codecs, nvcc, ...)
# --device-pip-list FILE: `python3 -m pip list --format=json` as printed on the device (one cheap
# device call: `python3 -m pip list --format=json > $OUT/device-pip-list.json`). Without it the
# package names in /work/.library/device/KINDS.md (or DEVICE_NAMES_FILE) are used, versions unknown:
# a package the device has is then kept unless something pins it with `==`.
# Reverse check: a kept device package whose own requirements the carried set breaks travels too
# (vLLM 0.34.0 carries huggingface-hub 2.x; the device's transformers 5.17.0 asks < 2.0).
# --override NAME==VER (or PIN_OVERRIDE="A==1 B==2"): resolve with this version instead of the one
# vLLM pins, when the registry lacks the pinned one (vLLM 0.34.0: flashinfer-python==0.7.3 is not
# there; 0.7.2.post1 and 0.7.4 are). Each override is written to MANIFEST.txt beside the parts, which
# travels, and `install` prints it: a run on an overridden set says so.
set -euo pipefail

VLLM_VERSION="${VLLM_VERSION:-0.33.0}"
PY_VERSION="${PY_VERSION:-3.12}"
PART_MIB="${PART_MIB:-60}"
CACHE="${GPU_WHEELS_CACHE:-/tmp/ppspec-gpu-wheels}"   # downloaded wheels (GBs): outside the repo
PARTS_DIR="${PARTS_DIR:-.whl/parts}"                  # ignored by git; carried one part per call
PPSPEC_WHL_DIR="${PPSPEC_WHL_DIR:-.whl/ppspec}"
DEVICE_PARTS="${DEVICE_PARTS:-/tmp/wheelparts}"
DEVICE_SITE="${DEVICE_SITE:-/tmp/site}"
DEVICE_WHEELS="${DEVICE_WHEELS:-/tmp/ppspec-device-wheels}"  # the reassembled wheels (install): ours, replaced each time
KINDS_MD="${KINDS_MD:-/work/.library/device/KINDS.md}"
OVERRIDES="${PIN_OVERRIDE:-}"
SELECT="$(cd "$(dirname "$0")" && pwd)/gpu_wheels_select.py"
# Carried whatever the device has (name==version): the image's NCCL 2.28.9 lacks symbols that
# libtorch_cuda 2.14 links against (ncclCommGrow, ncclCommSuspend, ncclPutSignal, ...).
FORCE_CARRY="${FORCE_CARRY:-nvidia-nccl-cu13==2.30.7}"
LEAN_SKIP="nvidia-cutlass-dsl-libs-cu12 nvidia-cutlass-dsl-libs-cu13 nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl-libs-core nvidia-cutlass-dsl quack-kernels tilelang z3-solver tokenspeed-triton tokenspeed-mla humming-kernels pynvvideocodec torchcodec nvidia-cuda-nvcc nvidia-nvvm nvidia-cuda-crt nvidia-cuda-cccl opencv-python-headless"

platform_flags() {
  local n
  for n in $(seq 5 39); do printf -- '--platform manylinux_2_%s_x86_64 ' "$n"; done
  printf -- '--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64'
}

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

TIER=lean
DEVICE_LIST=""
parse_opts() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --tier) TIER="$2"; shift 2 ;;
      --device-pip-list) DEVICE_LIST="$2"; shift 2 ;;
      --override) OVERRIDES="${OVERRIDES:+$OVERRIDES }$2"; shift 2 ;;
      *) echo "unknown option $1" >&2; usage ;;
    esac
  done
  case "$TIER" in lean|minimal|full) ;; *) echo "--tier must be lean, minimal or full" >&2; exit 2 ;; esac
}

OV_TAG=""  # the overrides' short hash: a report resolved with them is kept apart from one without
ov_args() { local o; for o in $OVERRIDES; do printf -- '--override %s ' "$o"; done; }
report_path() { echo "$CACHE/report-$VLLM_VERSION${OV_TAG:+-ov$OV_TAG}.json"; }

pip_dry_run() {
  # pip's resolution for the device's Python, from metadata only (PEP 658: no wheel is downloaded)
  # shellcheck disable=SC2046
  python3 -m pip install --dry-run --ignore-installed --only-binary=:all: --python-version "$PY_VERSION" \
    --implementation cp $(platform_flags) --target "$CACHE/dry-target" --quiet "$@"
}

resolve() {
  # The exact set pip would install for vLLM on the device's Python. With overrides: vLLM's own item
  # (--no-deps), then its requirements with the overridden pins replaced, merged into one report
  # that records what was asked and what is used ("ppspec_overrides"; the manifest repeats it).
  mkdir -p "$CACHE"
  [ -z "$OVERRIDES" ] || OV_TAG=$(echo "$OVERRIDES" | tr ' ' '\n' | sort | sha256sum | cut -c1-8)
  local report; report=$(report_path)
  [ -s "$report" ] && return 0
  echo "resolving vllm==$VLLM_VERSION for cp${PY_VERSION/./} manylinux x86_64${OVERRIDES:+ with $OVERRIDES} (metadata only, ~2 min)" >&2
  local err="$CACHE/resolve-$VLLM_VERSION.err"
  if [ -z "$OVERRIDES" ]; then
    pip_dry_run --report "$report.tmp" "vllm==$VLLM_VERSION" 2> "$err" || resolve_failed "$err"
  else
    pip_dry_run --no-deps --report "$CACHE/vllm-$VLLM_VERSION.json" "vllm==$VLLM_VERSION" 2> "$err" || resolve_failed "$err"
    # shellcheck disable=SC2046
    python3 "$SELECT" requirements "$CACHE/vllm-$VLLM_VERSION.json" $(ov_args) > "$CACHE/requirements-$VLLM_VERSION-ov$OV_TAG.txt"
    pip_dry_run --report "$CACHE/rest-$VLLM_VERSION-ov$OV_TAG.json" -r "$CACHE/requirements-$VLLM_VERSION-ov$OV_TAG.txt" 2> "$err" || resolve_failed "$err"
    # shellcheck disable=SC2046
    python3 "$SELECT" merge "$CACHE/vllm-$VLLM_VERSION.json" "$CACHE/rest-$VLLM_VERSION-ov$OV_TAG.json" $(ov_args) > "$report.tmp"
  fi
  mv "$report.tmp" "$report"
}

resolve_failed() {
  # pip's own message, then the way out when the registry lacks a version vLLM pins
  cat "$1" >&2
  local pin; pin=$(grep -o 'No matching distribution found for [A-Za-z0-9_.-]*==[^ ]*' "$1" | head -1 | sed 's/.* for //')
  if [ -n "$pin" ]; then
    echo "gpu_wheels: the registry has no ${pin} (vllm==$VLLM_VERSION or one of its requirements pins it)." >&2
    echo "  fix: --override ${pin%%==*}==VERSION with a version the registry has (\`python3 -m pip index versions ${pin%%==*}\`);" >&2
    echo "  the override is recorded in the manifest that travels with the parts" >&2
  fi
  exit 1
}

sel_args() {
  printf -- '--tier %s --kinds-md %s ' "$TIER" "$KINDS_MD"
  [ -z "$DEVICE_LIST" ] || printf -- '--device-pip-list %s ' "$DEVICE_LIST"
  ov_args
}

select_wheels() {
  # Prints "name version filename url" for every wheel to carry, given the tier and device list
  # (benchmarks/gpu_wheels_select.py: the forward check, then the reverse check on the device
  # packages' own metadata, fetched here once per set). A FORCE_CARRY wheel prints "? ?" for its
  # file name and url: prepare downloads it by version. The manifest goes to $CACHE/MANIFEST.txt.
  local report; report=$(report_path)
  local meta cands
  # shellcheck disable=SC2046
  cands=$(python3 "$SELECT" candidates "$report" $(sel_args) --lean-skip "$LEAN_SKIP" --force-carry "$FORCE_CARRY")
  # kept per candidate list: another device list asks for other packages' metadata
  meta="$CACHE/device-meta-$(echo "$cands" | sha256sum | cut -c1-12).json"
  if [ -n "$cands" ] && [ ! -s "$meta" ]; then
    # shellcheck disable=SC2086
    pip_dry_run --no-deps --report "$meta" $cands 2>/dev/null \
      || echo "gpu_wheels: the device packages' metadata could not be read ($cands): reverse check skipped" >&2
  fi
  # shellcheck disable=SC2046
  python3 "$SELECT" select "$report" $(sel_args) --lean-skip "$LEAN_SKIP" --force-carry "$FORCE_CARRY" \
    --device-meta "$meta" --manifest "$CACHE/MANIFEST.txt"
}

cmd_plan() {
  parse_opts "$@"
  resolve
  local sel; sel="$(select_wheels)"
  echo "$sel" | awk '{print $1, $2}'
  local n; n=$(echo "$sel" | grep -c . || true)
  local have=0 missing=0 f size
  while read -r _ _ f _; do
    [ -n "$f" ] || continue
    if [ -f "$CACHE/wheels/$f" ]; then size=$(stat -c %s "$CACHE/wheels/$f"); have=$((have + size)); else missing=$((missing + 1)); fi
  done <<< "$sel"
  echo "tier $TIER: $n wheels; downloaded so far: $((have / 1048576)) MiB (${missing} not downloaded yet: run prepare for exact sizes)"
  if [ "$missing" -eq 0 ]; then
    echo "parts of $PART_MIB MiB: $(( (have / 1048576 + PART_MIB - 1) / PART_MIB )) device calls to carry them, plus one to install and run"
  fi
}

cmd_prepare() {
  parse_opts "$@"
  resolve
  local sel; sel="$(select_wheels)"
  mkdir -p "$CACHE/wheels"
  local name version f url
  : > "$CACHE/selected.txt"
  while read -r name version f url; do
    [ -n "$f" ] || continue
    if [ "$f" = "?" ] || [ ! -f "$CACHE/wheels/$f" ]; then
      echo "downloading $name==$version" >&2
      # shellcheck disable=SC2046
      python3 -m pip download --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp $(platform_flags) \
        -d "$CACHE/wheels" --quiet "$name==$version" >&2
    fi
    if [ "$f" = "?" ]; then  # a FORCE_CARRY wheel: find the file pip saved
      f=$(cd "$CACHE/wheels" && ls -1 "${name//-/_}-$version-"*.whl | head -1)
    fi
    echo "$f" >> "$CACHE/selected.txt"
  done <<< "$sel"
  # ppspec itself, built from this checkout (it carries the engine plugin entry point)
  rm -rf "$PPSPEC_WHL_DIR"; mkdir -p "$PPSPEC_WHL_DIR"
  python3 -m pip wheel --no-deps --quiet -w "$PPSPEC_WHL_DIR" . >&2
  # one tar of the selected wheels, split into parts, with checksums
  rm -rf "$PARTS_DIR"; mkdir -p "$PARTS_DIR"
  tar -C "$CACHE/wheels" -cf - -T "$CACHE/selected.txt" | split -b "${PART_MIB}M" -d -a 3 - "$PARTS_DIR/part-"
  (cd "$PARTS_DIR" && sha256sum part-* > SHA256SUMS)
  cp "$CACHE/MANIFEST.txt" "$PARTS_DIR/MANIFEST.txt"
  grep '^override:\|^note:' "$PARTS_DIR/MANIFEST.txt" >&2 || true
  local total; total=$(du -cb "$PARTS_DIR"/part-* | tail -1 | cut -f1)
  echo "tier $TIER: $(wc -l < "$CACHE/selected.txt") wheels, $((total / 1048576)) MiB in $(ls "$PARTS_DIR"/part-* | wc -l) parts of <= $PART_MIB MiB under $PARTS_DIR; ppspec wheel in $PPSPEC_WHL_DIR"
}

cmd_calls() {
  # One device call per part (carry the part and the checksum list), then the install + run call,
  # then the run call to repeat (--resume) until it exits 0. The checkout travels with every call,
  # so the validation runs this checkout's code first on PYTHONPATH, ppspec_kit/ included (the
  # validation's models: not in the wheel); /tmp/site holds vLLM, torch and the ppspec wheel (for
  # its engine-plugin entry point).
  [ -f "$PARTS_DIR/SHA256SUMS" ] || { echo "run prepare first" >&2; exit 1; }
  local p run
  run='export PYTHONPATH=$PWD:'"$DEVICE_SITE"' PATH='"$DEVICE_SITE"'/bin:$PATH PYTHONUNBUFFERED=1 && python3 benchmarks/gpu_pp_validation.py --work /tmp/gpuval --out $OUT --resume --jobs 16 --budget-s 420'
  for p in "$PARTS_DIR"/part-*; do
    printf '{"kind": "nvidia-h200-x2", "carry": ["%s", "%s/SHA256SUMS", "%s/MANIFEST.txt"], "command": "bash benchmarks/gpu_wheels.sh receive %s"}\n' "$p" "$PARTS_DIR" "$PARTS_DIR" "$(basename "$p")"
  done
  printf '{"kind": "nvidia-h200-x2", "carry": ["%s", "%s/SHA256SUMS", "%s/MANIFEST.txt"], "timeout_s": 600, "command": "bash benchmarks/gpu_wheels.sh install && %s"}\n' \
    "$PPSPEC_WHL_DIR" "$PARTS_DIR" "$PARTS_DIR" "$run"
  printf '{"repeat_until_exit_0": true, "kind": "nvidia-h200-x2", "timeout_s": 600, "command": "%s"}\n' "$run"
}

cmd_receive() {
  # On the device: keep one part outside the repo copy and check it against SHA256SUMS.
  local part="$1"
  mkdir -p "$DEVICE_PARTS"
  cp "$PARTS_DIR/$part" "$DEVICE_PARTS/$part"
  cp "$PARTS_DIR/SHA256SUMS" "$DEVICE_PARTS/SHA256SUMS"
  [ ! -f "$PARTS_DIR/MANIFEST.txt" ] || cp "$PARTS_DIR/MANIFEST.txt" "$DEVICE_PARTS/MANIFEST.txt"
  (cd "$DEVICE_PARTS" && grep " $part\$" SHA256SUMS | sha256sum -c --quiet -)
  local want have
  want=$(grep -c . "$DEVICE_PARTS/SHA256SUMS"); have=$(ls "$DEVICE_PARTS"/part-* | wc -l)
  echo "received $part ($have of $want parts on this machine)"
}

cmd_install() {
  # On the device: all parts present and intact -> wheels -> ONE pip install --target DEVICE_SITE
  # of every wheel and ppspec's. One call because `pip install --target` with --upgrade replaces
  # whole top-level folders of the target: a second call for ppspec alone replaced bin/ and the
  # `vllm` command was gone. The stamp remembers which ppspec wheel went in; a new one reinstalls all.
  [ -f "$DEVICE_PARTS/SHA256SUMS" ] || cp "$PARTS_DIR/SHA256SUMS" "$DEVICE_PARTS/SHA256SUMS"
  (cd "$DEVICE_PARTS" && sha256sum -c --quiet SHA256SUMS) || { echo "parts missing or damaged: resend them (calls)" >&2; exit 1; }
  local want; want=$(cat "$PPSPEC_WHL_DIR"/*.whl | sha256sum | cut -c1-64)
  if [ "$(cat "$DEVICE_SITE/.ppspec-wheels-installed" 2>/dev/null)" != "$want" ]; then
    rm -rf "$DEVICE_WHEELS" "$DEVICE_SITE"; mkdir -p "$DEVICE_WHEELS"
    cat "$DEVICE_PARTS"/part-* | tar -C "$DEVICE_WHEELS" -xf -
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$DEVICE_SITE" "$DEVICE_WHEELS"/*.whl "$PPSPEC_WHL_DIR"/*.whl
    echo "$want" > "$DEVICE_SITE/.ppspec-wheels-installed"
    [ ! -f "$DEVICE_PARTS/MANIFEST.txt" ] || cp "$DEVICE_PARTS/MANIFEST.txt" "$DEVICE_SITE/.ppspec-manifest.txt"
  fi
  # the set's overrides and reverse-check carries, in every install's output (and so in the run's record)
  [ ! -f "$DEVICE_SITE/.ppspec-manifest.txt" ] || grep '^# \|^override:\|^note:' "$DEVICE_SITE/.ppspec-manifest.txt" || true
  [ -x "$DEVICE_SITE/bin/vllm" ] || { echo "install incomplete: $DEVICE_SITE/bin/vllm is missing" >&2; exit 1; }
  PYTHONPATH="$DEVICE_SITE" python3 -c "import torch, vllm; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count(), 'vllm', vllm.__version__)"
}

case "${1:-}" in
  plan) shift; cmd_plan "$@" ;;
  prepare) shift; cmd_prepare "$@" ;;
  calls) shift; cmd_calls ;;
  receive) shift; cmd_receive "$@" ;;
  install) shift; cmd_install ;;
  *) usage ;;
esac
