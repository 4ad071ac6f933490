#!/usr/bin/env bash
# `ppspec bench` on one GPU: the 8B-class planted shape (demo:llama-8b-planted + its EAGLE3
# drafter, run II of docs/gpu-validation.md) at PP=1, speculation off and k = 1, 2, 3, c = 1..32.
# On the device, after `bash benchmarks/gpu_wheels.sh install` (vLLM + ppspec in /tmp/site):
#   END=$(( $(date +%s) + 560 )) bash benchmarks/gpu_bench_pp1.sh docs/gpu-bench-h200-pp1/profile.yaml
# Stages (STAGES, default "1 1,2 1,2,3"): each one `ppspec bench --resume` into the same --out that
# adds the stage's new static arm(s), then measures the schedule bench derives (the tuned arm).
# Settings: CONC (1,4,16,32), REPEAT (3), PROMPTS (64), SESSIONS (per-arm: one engine session per arm
# for all its repeats; per-repeat: bench's default, REPEAT engine starts per arm), passed to bench.
# A stage starts only when the time left before END covers one arm of it, estimated from SESSIONS:
# per-arm one engine start plus all its runs (ARM_S, default 260 s), per-repeat REPEAT sessions of
# SESSION_S (default 200 s) each; a finished stage replaces the estimate with what one of its arms
# took. A stage that overruns is stopped with SIGINT at END: bench keeps every finished run, and the
# next call's --resume goes on from there. Repeat the call until it prints "bench: complete".
# Every engine's log is kept (a watcher copies each engine.log as it grows; logs/engine-N.log) and the
# memory lines vLLM logs (weights, KV cache) are collected in memory.txt.
# Results: $OUT/bench-8b-pp1 (the device returns at most 8 files: bench.json, report.md, the 3 plots,
# memory.txt, and rest.tgz with the per-arm files, the engine logs and the wheel set's manifest).
set -uo pipefail
PROFILE="${1:?profile}"
END="${END:-$(( $(date +%s) + 560 ))}"
STAGES="${STAGES:-1 1,2 1,2,3}"; CONC="${CONC:-1,4,16,32}"; REPEAT="${REPEAT:-3}"; PROMPTS="${PROMPTS:-64}"
SESSIONS="${SESSIONS:-per-arm}"
case "$SESSIONS" in per-arm|per-repeat) ;; *) echo "bench: SESSIONS must be per-arm or per-repeat" >&2; exit 2 ;; esac
W="${WORK:-/tmp/gpuval}"; B="${BENCH_DIR:-$W/bench-8b-pp1}"
SITE="${DEVICE_SITE:-/tmp/site}"
export PYTHONPATH=$PWD:$SITE PATH=$SITE/bin:$PATH PPSPEC_CACHE=$W/cache HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$B/logs"
left() { echo $(( END - $(date +%s) )); }

# engine logs: ppspec writes RUN_DIR/engine.log anew for each engine; keep a copy of each
watch_logs() {
  # an engine is told apart by its log's first bytes (vLLM's first line: its time and pid)
  local cur="" head n
  n=$(find "$B/logs" -name 'engine-*.log' | wc -l)
  while sleep 2; do
    for f in "$PPSPEC_CACHE"/runs/*/engine.log; do
      [ -s "$f" ] || continue
      head=$(head -c 256 "$f" | md5sum)
      if [ "$head" != "$cur" ]; then n=$((n + 1)); cur=$head; fi
      cp "$f" "$B/logs/engine-$n.log" 2>/dev/null
    done
  done
}
memory_lines() {
  # vLLM's own figures: weights loaded, KV cache memory and tokens (one line each per engine)
  local f
  for f in "$B"/logs/engine-*.log; do
    [ -f "$f" ] || continue
    echo "== $(basename "$f"): $(grep -o 'gpu-memory-utilization[^,]*\|gpu_memory_utilization=[0-9.]*' "$f" | head -1)"
    grep -h 'Model loading took\|Available KV cache memory\|KV cache size:\|CUDA graph memory profiling\|Maximum concurrency for' "$f" | sed 's/^.*\] //'
  done > "$B/memory.txt"
}
copy_out() {
  [ -z "${WATCH:-}" ] || kill "$WATCH" 2>/dev/null
  memory_lines
  [ ! -f "$SITE/.ppspec-manifest.txt" ] || cp "$SITE/.ppspec-manifest.txt" "$B/wheels-manifest.txt"
  if [ -n "${OUT:-}" ]; then
    local o; o="$OUT/$(basename "$B")"; mkdir -p "$o"
    for f in bench.json report.md bench.png tokens_per_s.png tpot.png memory.txt; do cp "$B/$f" "$o/" 2>/dev/null; done
    tar -C "$B" -czf "$o/rest.tgz" --exclude='*.png' . 2>/dev/null
  fi
}
trap copy_out EXIT
watch_logs & WATCH=$!

[ -f "$B/.gpu" ] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$B/.gpu"
s=$(date +%s)
python3 -c "from ppspec_cli import demo; [demo.ensure_demo_model(m) for m in ('llama-8b-planted', 'llama-8b-planted-eagle3')]" || { echo "bench: demo model build failed"; exit 1; }
echo "models ready ($(( $(date +%s) - s )) s; $(left) s left)"
# one arm's cost under these sessions (an engine start takes 1-3 min on the device)
if [ "$SESSIONS" = per-arm ]; then est=${ARM_S:-260}; else est=$(( REPEAT * ${SESSION_S:-200} )); fi
[ ! -f "$B/.arm_s-$SESSIONS" ] || est=$(cat "$B/.arm_s-$SESSIONS")
prev=0  # static arms of the stages before
for ks in $STAGES; do
  tag=${ks//,/}; nk=$(echo "$ks" | tr ',' '\n' | grep -c .)
  # the arms this stage serves: its new static arm(s), the tuned arm, and the baseline in the first
  arms=$(( nk - prev + 1 )); [ "$prev" -gt 0 ] || arms=$(( arms + 1 )); prev=$nk
  [ -f "$B/.done-$tag" ] && continue
  l=$(left)
  if [ "$l" -lt "$est" ]; then echo "bench: stage k=$ks needs ~$est s per arm ($SESSIONS sessions), $l s left: next call"; exit 3; fi
  s=$(date +%s)
  timeout -s INT "$l" ppspec bench "$PROFILE" --concurrency "$CONC" --num-speculative-tokens "$ks" \
      --num-prompts "$PROMPTS" --max-tokens 128 --input-len 128 --repeat "$REPEAT" --sessions "$SESSIONS" \
      --out "$B" --offline --resume > "$B/stdout-k$tag.txt" 2> "$B/stderr-k$tag.txt"
  rc=$?; took=$(( $(date +%s) - s ))
  echo "stage k=$ks: exit $rc after $took s"
  tail -n 30 "$B/stdout-k$tag.txt"; grep -v '^\s*$' "$B/stderr-k$tag.txt" | tail -n 12
  [ "$rc" -eq 0 ] || exit "$rc"
  touch "$B/.done-$tag"
  per=$(( took / arms )); [ "$per" -gt "$est" ] && est=$per
  echo "$est" > "$B/.arm_s-$SESSIONS"
done
echo "bench: complete"
