#!/usr/bin/env bash
# The whole H200 capture in one device call: probe, copy bandwidth, Kineto decode traces, CUPTI
# sample, manifest. Usage (from the repo root): bash scripts/h200/run_all.sh OUT [BUDGET_S]
# Each step is bounded by `timeout` and by what is left of BUDGET_S, so a failure or a hang in
# one step still leaves the others' files under OUT. H200_BW_ARGS / H200_CAPTURE_ARGS / H200_WORK
# override defaults (used for a CPU dry run with --tiny --device cpu).
set -u
OUT=${1:?OUT folder}; BUDGET=${2:-450}
HERE=$(cd "$(dirname "$0")" && pwd)
W=${H200_WORK:-/tmp/h200}; mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
cap() { local a=$1 b; b=$(left); b=$(( b - ${2:-0} )); [ "$b" -lt "$a" ] && a=$b; [ "$a" -lt 5 ] && a=5; echo "$a"; }
stamp() { echo; echo "##### [$(( $(date +%s) - T0 )) s] $*"; }

main() {
  stamp "probe"
  timeout "$(cap 75)" bash "$HERE/probe.sh" > "$OUT/probe.txt" 2>&1; echo "probe rc=$?"
  stamp "cupti build (background)"
  bash "$HERE/cupti_sample.sh" "$W/cupti" "$OUT" 120 build > "$W/cupti_build.log" 2>&1 &
  BUILD=$!
  stamp "bandwidth"
  timeout "$(cap 60)" python3 "$HERE/bandwidth.py" --json "$W/bandwidth.json" ${H200_BW_ARGS:-}; echo "bandwidth rc=$?"
  stamp "capture"
  timeout "$(cap 270 120)" python3 "$HERE/capture_pytorch_decode.py" --out "$OUT" --work "$W/capture" ${H200_CAPTURE_ARGS:-} 2>&1 \
    | grep -v -E '^(USDT|STAGE):'
  echo "capture rc=${PIPESTATUS[0]}"
  stamp "cupti"
  wait "$BUILD"; echo "build rc=$?"; cat "$W/cupti_build.log"
  timeout "$(cap 200 15)" bash "$HERE/cupti_sample.sh" "$W/cupti" "$OUT" "$(cap 195 20)" \
    2>&1 | tee "$W/cupti.log"
  echo "cupti rc=${PIPESTATUS[0]}"
  stamp "manifest"
  timeout 30 python3 "$HERE/merge_manifest.py" --out "$OUT/manifest.json" --capture "$W/capture/capture.json" \
    --bandwidth "$W/bandwidth.json" --cupti-log "$W/cupti.log" --probe "$OUT/probe.txt" \
    --device-command "${RUN_CMD:-bash scripts/h200/run_all.sh \$OUT}" \
    || { echo "merge failed"; cat "$W"/capture/capture.json "$W"/bandwidth.json; }
  ls -la "$OUT"
  stamp "done"
}
main 2>&1 | tee "$OUT/run.log"
