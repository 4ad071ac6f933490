#!/usr/bin/env bash
# `ppspec serve` + `ppspec verify` of one profile on the device, at a chosen gpu-memory-utilization,
# keeping the engine log and vLLM's memory lines (weights loaded, KV cache memory and tokens): with
# the same profile served by bench at its own utilization, two points of "what fits" on one shape.
# On the device, after `bash benchmarks/gpu_wheels.sh install` (vLLM + ppspec in /tmp/site):
#   UTIL=0.6 bash benchmarks/gpu_serve_verify.sh docs/gpu-bench-h200-pp1/profile.yaml
# UTIL: the engine's gpu-memory-utilization (default: the profile's own); NST: the drafter's
# num_speculative_tokens (default: the profile's); EAGER=1 serves it eager (no torch.compile, no CUDA
# graphs: the quickest start, without the graphs' memory); PROMPTS (16) x MAX_TOKENS (128) for verify; the engine
# is stopped (SIGTERM: serve stops its whole tree) after verify. STOP_AT=kv stops it as soon as vLLM has logged its KV
# cache size (the memory figures only: no CUDA graph capture wait, no verify). Exit: verify's (0 every
# gate passed; with STOP_AT=kv 0 once the line is there), or 1 when the engine never got there (serve's
# output and the log say why).
# Results: $OUT/serve-verify-uUTIL: verify.txt, memory.txt, rest.tgz (verify.json, serve's output,
# the engine log, the profile served).
set -uo pipefail
PROFILE="${1:?profile}"
UTIL="${UTIL:-}"; NST="${NST:-}"; EAGER="${EAGER:-}"; STOP_AT="${STOP_AT:-verify}"; PROMPTS="${PROMPTS:-16}"; MAX_TOKENS="${MAX_TOKENS:-128}"; READY_S="${READY_S:-480}"
W="${WORK:-/tmp/gpuval}"; SITE="${DEVICE_SITE:-/tmp/site}"
export PYTHONPATH=$PWD:$SITE PATH=$SITE/bin:$PATH PPSPEC_CACHE=$W/cache HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D="$W/serve-verify-u${UTIL:-profile}${NST:+-k$NST}${EAGER:+-eager}"; rm -rf "$D"; mkdir -p "$D/run"
P="$D/profile.yaml"
python3 - "$PROFILE" "$P" "$UTIL" "$NST" "$EAGER" <<'PY' || exit 2
import sys, yaml
src, dst, util, nst, eager = sys.argv[1:6]
doc = yaml.safe_load(open(src))
if eager:
    doc.setdefault("engine", {})["enforce-eager"] = True
    doc["engine"].pop("compilation-config", None)
if util:
    doc.setdefault("engine", {})["gpu-memory-utilization"] = float(util)
if nst:
    doc["drafter"]["num_speculative_tokens"] = int(nst)
yaml.safe_dump(doc, open(dst, "w"), sort_keys=False)
PY
SP=""
finish() {
  if [ -n "$SP" ] && kill -0 "$SP" 2>/dev/null; then
    kill -TERM "$SP"; for _ in $(seq 60); do kill -0 "$SP" 2>/dev/null || break; sleep 1; done
  fi
  grep -h 'Model loading took\|Available KV cache memory\|KV cache size:\|CUDA graph memory profiling\|Maximum concurrency for' "$D/run/engine.log" 2>/dev/null \
    | sed 's/^.*\] //' > "$D/memory.txt"
  echo "gpu-memory-utilization ${UTIL:-as in the profile}:"; cat "$D/memory.txt"
  if [ -n "${OUT:-}" ]; then
    local o; o="$OUT/$(basename "$D")"; mkdir -p "$o"
    cp "$D/verify.txt" "$D/memory.txt" "$o/" 2>/dev/null
    tar -C "$D" -czf "$o/rest.tgz" . 2>/dev/null
  fi
}
trap finish EXIT
python3 -c "from ppspec_cli import demo; [demo.ensure_demo_model(m) for m in ('llama-8b-planted', 'llama-8b-planted-eagle3')]" || { echo "serve-verify: demo model build failed"; exit 1; }
s=$(date +%s)
ppspec serve "$P" --offline --run-dir "$D/run" > "$D/serve.txt" 2>&1 &
SP=$!
ready='serving at http'; where="$D/serve.txt"
[ "$STOP_AT" != kv ] || { ready='KV cache size:'; where="$D/run/engine.log"; }
until grep -q "$ready" "$where" 2>/dev/null; do
  if ! kill -0 "$SP" 2>/dev/null || [ $(( $(date +%s) - s )) -gt "$READY_S" ]; then
    echo "serve-verify: the engine did not become ready ($(( $(date +%s) - s )) s)"; tail -n 40 "$D/serve.txt"; exit 1
  fi
  sleep 2
done
echo "serve-verify: '$ready' after $(( $(date +%s) - s )) s"
[ "$STOP_AT" != kv ] || exit 0
ppspec verify "$P" --num-prompts "$PROMPTS" --max-tokens "$MAX_TOKENS" --out "$D/verify.json" > "$D/verify.txt" 2>&1
rc=$?
cat "$D/verify.txt"
exit "$rc"
