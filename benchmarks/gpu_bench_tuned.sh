#!/usr/bin/env bash
# `ppspec bench` with repeats and the tuned (dynamic speculation schedule) arm on one H200: the
# 8B-class planted shape at PP=1 (docs/gpu-bench-h200-pp1/profile.yaml), baseline, static k (KS) and
# the schedule bench derives from them, c = CONC, REPEAT repeats per (arm, level).
# On the device, after `bash benchmarks/gpu_wheels.sh install` (vLLM 0.33 + ppspec in /tmp/site):
#   END=$(( $(date +%s) + 570 )) bash benchmarks/gpu_bench_tuned.sh docs/gpu-bench-h200-pp1/profile.yaml
# Each call runs one `ppspec bench --resume` into the same --out until END (SIGINT then: bench keeps
# every finished run); repeat the call until it prints "bench: complete". Results under
# $OUT/bench-tuned: bench.json, report.md, the plots, rest.tgz (per-run files and logs).
set -uo pipefail
PROFILE="${1:?profile}"
END="${END:-$(( $(date +%s) + 560 ))}"
KS="${KS:-1}"; CONC="${CONC:-1,4,16,32}"; REPEAT="${REPEAT:-3}"; PROMPTS="${PROMPTS:-32}"
# per-arm: one engine session per arm (a start takes 1-3 min on the device); per-repeat interleaves
SESSIONS="${SESSIONS:-per-arm}"; B="${BENCH_DIR:-/tmp/gpuval/bench-tuned}"
W=/tmp/gpuval
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PPSPEC_CACHE=$W/cache HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$B"
copy_out() {
  if [ -n "${OUT:-}" ]; then
    local o; o="$OUT/$(basename "$B")"; mkdir -p "$o"
    for f in bench.json report.md bench.png tokens_per_s.png tpot.png; do cp "$B/$f" "$o/" 2>/dev/null; done
    tar -C "$B" -czf "$o/rest.tgz" --exclude='*.png' . 2>/dev/null
  fi
}
trap copy_out EXIT
[ -f "$B/.gpu" ] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$B/.gpu"
s=$(date +%s)
python3 -c "from ppspec_cli import demo; [demo.ensure_demo_model(m) for m in ('llama-8b-planted', 'llama-8b-planted-eagle3')]" || { echo "bench: demo model build failed"; exit 1; }
echo "models ready ($(( $(date +%s) - s )) s; $(( END - $(date +%s) )) s left)"
left=$(( END - $(date +%s) ))
timeout -s INT "$left" ppspec bench "$PROFILE" --concurrency "$CONC" --num-speculative-tokens "$KS" --repeat "$REPEAT" --sessions "$SESSIONS" \
    --num-prompts "$PROMPTS" --max-tokens 128 --input-len 128 --out "$B" --offline --resume \
    >> "$B/stdout.txt" 2>> "$B/stderr.txt"
rc=$?
echo "bench exit $rc after $(( $(date +%s) - s )) s"
grep -v '^\s*$' "$B/stderr.txt" | tail -n 25
[ "$rc" -eq 0 ] && echo "bench: complete"
exit "$rc"
