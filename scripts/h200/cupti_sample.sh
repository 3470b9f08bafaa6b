#!/usr/bin/env bash
# Build NVIDIA's cupti_trace_injection sample (nvcc line as docs/reference/GPU.md shows)
# and run short CUDA workloads under it; each workload's stdout (the sample's activity text) is
# gzipped into OUTDIR. Usage: cupti_sample.sh WORKDIR OUTDIR [TIMEOUT_S] [build]
# (a 4th argument `build` only builds, so it can run while other work does).
#   cupti_torch.txt.gz          PyTorch: eager decode of the random 1B Llama, batch 1, ~1K context,
#                               ungated, no CUDA graph, 60 steps (so >= one 8 MB buffer fills)
#   cupti_torch_preload.txt.gz  the same with LD_PRELOAD of the toolkit's libcupti, only if the
#                               first one shows a CUPTI error or too few records
#   cupti_native.txt.gz         cupti_decode_like.cu: eager steps then CUDA-graph replays
# The workloads' stderr (step times, sample errors) goes to our stdout for the run log.
set -u
W=${1:?workdir}; OUTD=${2:?outdir}; T=${3:-200}
HERE=$(cd "$(dirname "$0")" && pwd)
C=/usr/local/cuda; S=$C/extras/CUPTI/samples
mkdir -p "$W" "$OUTD"; cd "$W" || exit 1
START=$(date +%s)
left() { echo $(( T - ($(date +%s) - START) )); }
if [ ! -f libcupti_trace_injection.so ]; then
  echo "[cupti] building libcupti_trace_injection.so and cupti_decode_like"
  timeout 120 nvcc -O2 -arch=sm_90 -o cupti_decode_like "$HERE/cupti_decode_like.cu" > build_native.log 2>&1 &
  NB=$!
  timeout 120 nvcc -Xcompiler -fPIC -I$C/include -I$C/extras/CUPTI/include -I$S/common -shared \
    -o libcupti_trace_injection.so $S/cupti_trace_injection/cupti_trace_injection.cpp \
    -L$C/lib64 -lcuda -L$C/extras/CUPTI/lib64 -lcupti || { echo "[cupti] build failed rc=$?"; exit 3; }
  wait $NB; echo "[cupti] native build rc=$?"; cat build_native.log
fi
ls -la libcupti_trace_injection.so cupti_decode_like
[ "${4:-}" = build ] && exit 0
export LD_LIBRARY_PATH=$C/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}  # as GPU.md (absent on the H200: libcupti is in $C/lib64)
INJ=$PWD/libcupti_trace_injection.so
summary() {  # file rc
  echo "[cupti] $1: rc=$2 lines=$(wc -l < "$1") kernel_records=$(grep -c '^CONCURRENT_KERNEL' "$1") errors=$(grep -c '^Error' "$1")"
  grep -o '^[A-Z][A-Z_0-9]* ' "$1" | sort | uniq -c | sort -rn | head -12
  grep -m3 -i 'error' "$1"
}
records() { grep -c -E '^(CONCURRENT_KERNEL|RUNTIME|DRIVER|MEMCPY|MEMSET|OVERHEAD|MEMORY2) ' "$1"; }

echo "[cupti] native baseline (no injection)"
timeout 30 ./cupti_decode_like 20 20 2>&1 >/dev/null | tail -4
echo "[cupti] native under injection"
timeout 60 env LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$C/lib64 CUDA_INJECTION64_PATH=$INJ ./cupti_decode_like 20 20 > cupti_native.txt 2> cupti_native.err
rc=$?; tail -4 cupti_native.err; grep -m3 Error cupti_native.err; summary cupti_native.txt $rc
gzip -6 -c cupti_native.txt > "$OUTD/cupti_native.txt.gz"

echo "[cupti] torch baseline (no injection)"
timeout $(( $(left) / 4 )) python3 "$HERE/cupti_workload.py" --steps 60 --graph-replays 0 --label baseline 2>&1 >/dev/null | grep -v Warning | tail -3
echo "[cupti] torch under injection"
timeout $(( $(left) / 2 )) env CUDA_INJECTION64_PATH=$INJ python3 "$HERE/cupti_workload.py" --steps 60 --graph-replays 0 \
  --label injected > cupti_torch.txt 2> cupti_torch.err
rc=$?; grep -v Warning cupti_torch.err | tail -6; summary cupti_torch.txt $rc
head -c 300000000 cupti_torch.txt | gzip -6 > "$OUTD/cupti_torch.txt.gz"
if [ "$rc" != 0 ] || [ "$(records cupti_torch.txt)" -lt 3000 ]; then
  echo "[cupti] torch under injection with LD_PRELOAD=$C/lib64/libcupti.so.13"
  timeout $(( $(left) - 5 )) env CUDA_INJECTION64_PATH=$INJ LD_PRELOAD=$C/lib64/libcupti.so.13 \
    python3 "$HERE/cupti_workload.py" --steps 60 --graph-replays 0 --label injected_preload \
    > cupti_torch_preload.txt 2> cupti_torch_preload.err
  rc=$?; grep -v Warning cupti_torch_preload.err | tail -6; summary cupti_torch_preload.txt $rc
  head -c 300000000 cupti_torch_preload.txt | gzip -6 > "$OUTD/cupti_torch_preload.txt.gz"
fi
ls -la "$OUTD"
