#!/usr/bin/env bash
# `ppspec bench` on one H200: the 8B-class planted shape (demo:llama-8b-planted + its EAGLE3
# drafter, run II of docs/gpu-validation.md) at PP=1, speculation off and k = 1, 2, 3, c = 1..32.
# On the device, after `bash benchmarks/gpu_wheels.sh install` (vLLM 0.33 + ppspec in /tmp/site):
#   END=$(( $(date +%s) + 560 )) bash benchmarks/gpu_bench_pp1.sh docs/gpu-bench-h200-pp1/profile.yaml
# Stages: baseline + spec-k1, then spec-k2, then spec-k3, each one `ppspec bench --resume` that adds
# one arm to the same --out, then measures the schedule bench derives (the tuned arm). A stage starts only when the time left before END covers it (estimate:
# the slowest arm so far, 260 s before any was measured), so no engine start is lost to the per-call
# limit; a stage that still overruns is stopped with SIGINT (bench keeps its finished levels).
# Repeat the call until it prints "bench: complete". Results: $OUT/bench-8b-pp1 (the device returns at most
# 8 files, so: bench.json, report.md, the 3 plots, and rest.tgz with the per-arm files and the logs).
set -uo pipefail
PROFILE="${1:?profile}"
END="${END:-$(( $(date +%s) + 560 ))}"
W=/tmp/gpuval; B=$W/bench-8b-pp1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PPSPEC_CACHE=$W/cache HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$B"
left() { echo $(( END - $(date +%s) )); }
copy_out() {
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT/bench-8b-pp1"
    log=$(ls -t ~/.cache/ppspec/runs/*/engine.log 2>/dev/null | head -1)
    [ -n "$log" ] && tail -c 200000 "$log" > "$B/engine-last.log"
    for f in bench.json report.md bench.png tokens_per_s.png tpot.png; do cp "$B/$f" "$OUT/bench-8b-pp1/" 2>/dev/null; done
    tar -C "$B" -czf "$OUT/bench-8b-pp1/rest.tgz" --exclude='*.png' . 2>/dev/null
  fi
}
trap copy_out EXIT
[ -f "$B/.gpu" ] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$B/.gpu"
s=$(date +%s)
python3 -c "from ppspec_cli import demo; [demo.ensure_demo_model(m) for m in ('llama-8b-planted', 'llama-8b-planted-eagle3')]" || { echo "bench: demo model build failed"; exit 1; }
echo "models ready ($(( $(date +%s) - s )) s; $(left) s left)"
est=$(cat "$B/.arm_s" 2>/dev/null || echo 260)
for ks in 1 1,2 1,2,3; do
  tag=${ks//,/}
  [ -f "$B/.done-$tag" ] && continue
  arms=2; [ "$ks" = 1 ] && arms=3  # the new static arm(s) and the tuned arm (re-measured when the derived schedule changes)
  need=$(( arms * est )); l=$(left)
  if [ "$l" -lt "$need" ]; then echo "bench: stage k=$ks needs ~$need s, $l s left: next call"; exit 3; fi
  s=$(date +%s)
  timeout -s INT "$l" ppspec bench "$PROFILE" --concurrency 1,4,16,32 --num-speculative-tokens "$ks" \
      --num-prompts 64 --max-tokens 128 --input-len 128 --repeat 3 --out "$B" --offline --resume \
      > "$B/stdout-k$tag.txt" 2> "$B/stderr-k$tag.txt"
  rc=$?; took=$(( $(date +%s) - s ))
  echo "stage k=$ks: exit $rc after $took s"
  tail -n 30 "$B/stdout-k$tag.txt"; grep -v '^\s*$' "$B/stderr-k$tag.txt" | tail -n 12
  [ "$rc" -eq 0 ] || exit "$rc"
  touch "$B/.done-$tag"
  per=$(( took / arms )); [ "$per" -gt "$est" ] && est=$per
  echo "$est" > "$B/.arm_s"
done
echo "bench: complete"
