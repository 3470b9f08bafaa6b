#!/usr/bin/env bash
# Issue 30 on a node of two or more GPUs (the device tool's nvidia-h200-x2 or larger): campaigns/cuda-h200-multigpu.yaml
# once through --cluster with one worker per GPU (each arm on its own GPU, in parallel), then once on GPU 0 alone in
# sequence; both pages and their raw data come back, the parallel run's page with its Agreement section (where its
# verdicts and before/after changes agree with the sequential run's, and beside each that does not, both runs'
# devices, contention, spread and counter checks: `campaign report --agree-with`). Run through scripts/h200/device_call.sh:
#   SCRIPT=scripts/h200/multigpu.sh CAMPAIGN=cuda-h200-multigpu bash scripts/h200/device_call.sh 570
#   run(..., carry=[".whl", ".carry/llama-src.tar.gz"], kind="nvidia-h200-x2")
# The wall time of each run is written to $WORK/multigpu-times.json for the README.
set -eu
PERFLIB=${PERFLIB:-python3 -m perflib}
CAMPAIGN=${CAMPAIGN:-cuda-h200-multigpu}
WORK=${WORK:-/tmp/h200}
PORT=${PORT:-8786}
SCHED=tcp://127.0.0.1:$PORT
GPUS=$(nvidia-smi -L | wc -l)
[ "$GPUS" -ge 2 ] || { echo "multigpu.sh: $GPUS GPU(s) here; issue 30 needs two or more" >&2; exit 2; }
CORES=$(nproc); PER=$(( CORES / GPUS ))
$PERFLIB server build --backend cuda --gpu-arch 90 -j "$CORES"
$PERFLIB server cupti
pids=()
stop_all() { for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; wait "${pids[i]}" 2>/dev/null || true; done; }
trap stop_all EXIT
python3 -m distributed.cli.dask_scheduler --host 127.0.0.1 --port "$PORT" --no-dashboard > "$WORK/cluster-scheduler.log" 2>&1 & pids+=($!)
sleep 3
for i in $(seq 0 $((GPUS - 1))); do
  $PERFLIB cluster worker "$SCHED" --host 127.0.0.1 --backend cuda --gpu "$i" --cpus "$((i * PER))-$((i * PER + PER - 1))" \
    --name "gpu$i" > "$WORK/cluster-gpu$i.log" 2>&1 & pids+=($!)
done
nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader || true
t0=$(date +%s.%N)
$PERFLIB campaign run "campaigns/$CAMPAIGN.yaml" --cluster "$SCHED" --guard --data "$WORK/parallel" --reports "$WORK/reports" ${CAMPAIGN_ARGS:-}
t1=$(date +%s.%N)
stop_all; pids=()
CUDA_VISIBLE_DEVICES=0 $PERFLIB campaign run "campaigns/$CAMPAIGN.yaml" --guard --data "$WORK/sequential" --reports "$WORK/reports" ${CAMPAIGN_ARGS:-}
t2=$(date +%s.%N)
$PERFLIB campaign report "campaigns/$CAMPAIGN.yaml" --data "$WORK/parallel" --reports "$WORK/reports" \
  --agree-with "$WORK/sequential" --agree-label "one GPU in sequence" --json > "$WORK/multigpu-agreement.json"
python3 -c "import json,sys; a,b,c=map(float,sys.argv[1:]); json.dump({'gpus': $GPUS, 'parallel_s': b-a, 'sequential_s': c-b}, open('$WORK/multigpu-times.json','w'))" "$t0" "$t1" "$t2"
cat "$WORK/multigpu-times.json"
