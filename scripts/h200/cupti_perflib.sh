#!/usr/bin/env bash
# perflib's CUPTI injection library (perflib/server/cupti/perflib_cupti.cpp) on a CUDA GPU, against
# cupti_decode_like.cu (eager launches, then CUDA-graph replays: the workload that lost every record under
# the CUDA sample), with the kernel, copy and memset counts compared with what the program launched; a
# SIGTERM in the middle of a run; the CUDA sample on the same workload for contrast; perflib's reader on
# the capture; and, if time is left, the PyTorch workload (cupti_workload.py) with a torch CUDA graph.
#
# Usage, from the repo root: bash scripts/h200/cupti_perflib.sh OUTDIR [BUDGET_S] 2>&1 | tee OUTDIR/log.txt
# Big captures stay in /tmp/cupti-perflib; OUTDIR gets the small ones (at most 5 files): the stats of each
# run and a 20+20-step capture, gzipped, for tests/data/traces/.
set -u
OUTD=${1:?outdir}; B=${2:-150}; T0=$(date +%s); left() { echo $(( B - ($(date +%s) - T0) )); }
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
C=${CUDA_HOME:-/usr/local/cuda}; S=$C/extras/CUPTI/samples; W=/tmp/cupti-perflib
E=${EAGER:-3000}; G=${GRAPH:-6000}
mkdir -p "$OUTD" $W/p $W/s $W/k $W/t
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
exec 3>&1  # the log, whatever a command's own output is redirected to
run() {  # LABEL COMMAND...: the command's exit code and wall time
  local label=$1; shift; local t; t=$(date +%s%N); "$@"; local rc=$?
  echo "[$label] rc=$rc wall_ms=$(ms_since "$t")" >&3
}
echo "== machine $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
echo "== build"
t=$(date +%s%N)
nvcc -O2 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden,-fvisibility-inlines-hidden -shared -I$C/include \
  -o $W/libperflib_cupti.so "$REPO/perflib/server/cupti/perflib_cupti.cpp" -L$C/lib64 -lcupti -lpthread \
  -Xlinker -rpath,$C/lib64 & b1=$!
nvcc -O2 -arch=sm_90 -o $W/decode "$HERE/cupti_decode_like.cu" & b2=$!
nvcc -Xcompiler -fPIC -I$C/include -I$C/extras/CUPTI/include -I$S/common -shared -o $W/libsample.so \
  $S/cupti_trace_injection/cupti_trace_injection.cpp -L$C/lib64 -lcuda -L$C/extras/CUPTI/lib64 -lcupti & b3=$!
wait $b1; echo "perflib library build rc=$?"; wait $b2; echo "decode build rc=$?"; wait $b3; echo "sample build rc=$?"
echo "builds: $(ms_since "$t") ms"
nm -D --defined-only $W/libperflib_cupti.so | grep -E 'InitializeInjection|perflib_cupti_version'
P="env CUDA_INJECTION64_PATH=$W/libperflib_cupti.so"

echo "== 1. baseline, no injection: $E eager + $G graph steps"
run baseline timeout 60 $W/decode $E $G 2> $W/base.err > /dev/null
tail -1 $W/base.err; python3 "$HERE/cupti_steps.py" $W/base.err baseline

echo "== 2. perflib's library, the same workload"
run perflib timeout 90 $P PERFLIB_CUPTI_OUTPUT=$W/p/cupti.txt $W/decode $E $G 2> $W/p.err > /dev/null
grep -v " step " $W/p.err | tail -4; python3 "$HERE/cupti_steps.py" $W/p.err perflib; ls -la $W/p
python3 "$HERE/cupti_count.py" $W/p/cupti.txt $E $G; cat $W/p/cupti-stats.json
cp $W/p/cupti-stats.json "$OUTD/native_stats.json"

echo "== 3. a small capture for the tests: 20 eager + 20 graph steps"
run small timeout 30 $P PERFLIB_CUPTI_OUTPUT=$W/s/cupti.txt $W/decode 20 20 2> $W/s.err > /dev/null
python3 "$HERE/cupti_count.py" $W/s/cupti.txt 20 20
gzip -9 -c $W/s/cupti.txt > "$OUTD/perflib_cupti_h200_decode_like.txt.gz"
cp $W/s/cupti-stats.json "$OUTD/perflib_cupti_h200_decode_like_stats.json"

echo "== 4. SIGTERM after 3 s of graph replays"
$P PERFLIB_CUPTI_OUTPUT=$W/k/cupti.txt $W/decode 0 100000000 2> $W/k.err > /dev/null & pid=$!
sleep 3; kill -TERM $pid; wait $pid; echo "[sigterm] rc=$? (143: ended by SIGTERM, as without the library)"
echo "graph steps printed before the signal: $(grep -c 'graph step' $W/k.err)"
python3 "$HERE/cupti_count.py" $W/k/cupti.txt
grep -E '"(records|dropped_records|complete|ended_by|flushes|buffers)"' $W/k/cupti-stats.json

echo "== 5. the CUDA sample, the same workload as 2 (left $(left) s)"
if [ "$(left)" -gt 40 ]; then
  run sample timeout $(( $(left) > 100 ? 60 : 30 )) env CUDA_INJECTION64_PATH=$W/libsample.so $W/decode $E $G \
    > $W/sample.txt 2> $W/sample.err
  python3 "$HERE/cupti_steps.py" $W/sample.err sample; grep -v " step " $W/sample.err | tail -3
  grep -m3 -i "error" $W/sample.txt; python3 "$HERE/cupti_count.py" $W/sample.txt $E $G
fi

echo "== 6. perflib's reader on capture 2 (left $(left) s)"
if [ "$(left)" -gt 30 ]; then
  run reader env PYTHONPATH="$REPO" timeout $(( $(left) - 10 )) python3 -c "
import time
t = time.time()
from perflib.traces.cupti_text import read_cupti_text
tr = read_cupti_text('$W/p/cupti.txt')
d = tr.dispatches
print({'dispatches': len(d), 'by_kind': d['kind'].value_counts().to_dict(), 'api': len(tr.api), 'meta': tr.meta,
       'read_s': round(time.time() - t, 1)})"
fi

L=$(left); echo "== 7. the PyTorch workload under perflib's library (left $L s)"
if [ "$L" -gt 70 ]; then
  run torch timeout $(( L - 10 )) $P PERFLIB_CUPTI_OUTPUT=$W/t/cupti.txt python3 "$HERE/cupti_workload.py" \
    --steps 30 --graph-replays 2000 --label perflib 2> $W/t.err > /dev/null
  grep -v -i warn $W/t.err | tail -3 | cut -c1-400; python3 "$HERE/cupti_count.py" $W/t/cupti.txt
  cp $W/t/cupti-stats.json "$OUTD/torch_stats.json" && cat $W/t/cupti-stats.json
fi
echo "== end, $(( $(date +%s) - T0 )) s"
