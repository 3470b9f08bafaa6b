#!/usr/bin/env bash
# One campaign over two Dask workers of the H200 host (issue 29, docs/CLUSTER.md), as a user types it on a
# GPU box with perflib[cluster] installed (or this checkout and carried wheels on PYTHONPATH):
# the two llama-server builds, a scheduler on loopback, a worker pinned to GPU 0 (CPUs 0-3) for the CUDA
# backend, a CPU worker (no GPU visible, CPUs 4-15, its own data folder: its run folders are copied back in
# 8 MiB chunks and checked), then `campaign run --cluster`. The scheduler and the workers are stopped at the
# end; their logs follow the campaign's output.
#   SCRIPT=scripts/h200/cluster.sh CAMPAIGN=cuda-cpu-h200-cluster bash scripts/h200/device_call.sh 570
# --psi-threshold 1: PSI is the container's, not a CPU set's; the CPU backend's 10 busy threads on CPUs 4-15
# would otherwise mark the CUDA runs on CPUs 0-3 contended. The CPU share and run-queue waits still judge
# each worker's own CPU set.
set -eu
PERFLIB=${PERFLIB:-python3 -m perflib}
CAMPAIGN=${CAMPAIGN:-cuda-cpu-h200-cluster}
WORK=${WORK:-/tmp/h200}
PORT=${PORT:-8786}
SCHED=tcp://127.0.0.1:$PORT
mkdir -p "$WORK"
$PERFLIB server build --backend cpu -j "$(nproc)"
$PERFLIB server build --backend cuda --gpu-arch 90 -j "$(nproc)"
pids=()
stop_all() {  # the workers first (their nannies stop them), then the scheduler
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; wait "${pids[i]}" 2>/dev/null || true; done
  for log in "$WORK"/cluster-*.log; do echo "--- $log (last 40 lines)"; tail -40 "$log"; done
}
trap stop_all EXIT
python3 -m distributed.cli.dask_scheduler --host 127.0.0.1 --port "$PORT" --no-dashboard \
  > "$WORK/cluster-scheduler.log" 2>&1 & pids+=($!)
sleep 3
$PERFLIB cluster worker "$SCHED" --host 127.0.0.1 --backend cuda --gpu 0 --cpus 0-3 --name h200-gpu0 \
  > "$WORK/cluster-gpu0.log" 2>&1 & pids+=($!)
$PERFLIB cluster worker "$SCHED" --host 127.0.0.1 --backend cpu --gpu none --cpus 4-15 --name h200-cpu \
  --data "$WORK/cpu-worker-data" > "$WORK/cluster-cpu.log" 2>&1 & pids+=($!)
nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader || true
$PERFLIB campaign run "campaigns/$CAMPAIGN.yaml" --cluster "$SCHED" --guard --guard-idle-s "${GUARD_IDLE_S:-10}" \
  --psi-threshold 1 ${CAMPAIGN_ARGS:-}
