#!/usr/bin/env bash
# One call of the `device` tool for scripts/h200/campaign.sh: the H200 has no network, so perflib's
# notebook dependencies come as wheels (.whl/) and the pinned llama.cpp source as a trimmed tarball
# (.carry/llama-src.tar.gz, from scripts/h200/trim_source.sh). The campaign runs in its own session so
# that it outlives the call; call again within the machine's 30 s warm window to wait for the rest.
# What exists is copied to $OUT each time (partial results too).
#   CAMPAIGN=cuda-h200-fa CUPTI_PROOF=1 bash scripts/h200/device_call.sh 570
#   run(command="...", carry=[".whl", ".carry/llama-src.tar.gz"])
# CAMPAIGN: the campaigns/<name>.yaml to run (default cuda-h200-batch). SCRIPT: what runs it (default
# scripts/h200/campaign.sh; scripts/h200/cluster.sh for the cluster campaign, its wheels from
# scripts/h200/cluster_wheels.sh in .whl/ too). CUPTI_PROOF=1: also run
# scripts/h200/cupti_perflib.sh (perflib's CUPTI library on a graph-replaying workload) while llama-server
# builds; its small outputs come back as cupti.tgz.
set -u
BUDGET=${1:-570}
CAMPAIGN=${CAMPAIGN:-cuda-h200-batch}
WORK=/tmp/h200
[ "${RESTART:-}" = 1 ] && rm -f "$WORK/finished" "$WORK/pid"
mkdir -p "$WORK"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PERFLIB_CACHE=$WORK/cache PERFLIB_LLAMA_SOURCE=$PWD/.carry/llama-src.tar.gz PYTHONUNBUFFERED=1
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD CAMPAIGN
# data and page outside the checkout: the next call re-syncs the checkout and would delete them
export CAMPAIGN_ARGS="--data $WORK/data --reports $WORK/reports"
mkdir -p "$WORK/data/raw"
[ -d ".carry/partial/$CAMPAIGN" ] && [ ! -d "$WORK/data/raw/$CAMPAIGN" ] && \
  cp -r ".carry/partial/$CAMPAIGN" "$WORK/data/raw/"   # runs an earlier machine completed
if [ "${CUPTI_PROOF:-}" = 1 ] && [ ! -f "$WORK/cupti.started" ]; then
  touch "$WORK/cupti.started"; mkdir -p "$WORK/cupti"; cp -r scripts/h200 perflib/server/cupti "$WORK/cupti-src" 2>/dev/null
  setsid nohup bash -c "bash scripts/h200/cupti_perflib.sh $WORK/cupti ${CUPTI_BUDGET:-150} > $WORK/cupti/log.txt 2>&1; touch $WORK/cupti.done" \
    < /dev/null > /dev/null 2>&1 &
fi
if [ ! -f "$WORK/pid" ] || ! kill -0 "$(cat "$WORK/pid")" 2>/dev/null; then
  [ -f "$WORK/finished" ] || {
    setsid nohup bash -c 'bash '"${SCRIPT:-scripts/h200/campaign.sh}"'; echo "exit $?" > '"$WORK/finished" \
      >> "$WORK/campaign.log" 2>&1 < /dev/null & echo $! > "$WORK/pid"; }
fi
t0=$(date +%s)
while [ ! -f "$WORK/finished" ] && [ $(( $(date +%s) - t0 )) -lt "$BUDGET" ]; do sleep 5; done
tail -c 6000 "$WORK/campaign.log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$WORK/gpu.txt" 2>&1
cp "$WORK/campaign.log" "$WORK/gpu.txt" "$OUT/" 2>/dev/null
tail -80 "$WORK"/cache/build-cuda.log > "$OUT/build-tail.log" 2>/dev/null
[ -d "$WORK/cupti" ] && tar czf "$OUT/cupti.tgz" -C "$WORK" cupti
# the run folders, server.json and the page; lifetime captures stay behind (the cut traces are in the run
# folders), but the cupti-stats.json of each capture comes back
# the lifetime captures (cupti.txt, gzipped since the cut) stay behind; a multi-GPU run's two data folders
# (scripts/h200/multigpu.sh) come back too. Over 15 MiB the archive is split (the device tool returns files of
# at most 16 MiB, 64 MiB in all): `cat results.tgz.part-* | tar xz` here.
tar czf "$WORK/results.tgz" -C "$WORK" --exclude='*/capture/*/cupti.txt*' --exclude='*.nsys-rep' \
  "data/raw/$CAMPAIGN" "data/derived/$CAMPAIGN" reports $(cd "$WORK" && ls -d cluster-*.log parallel/raw \
  sequential/raw multigpu-times.json 2>/dev/null) 2>/dev/null
if [ "$(stat -c %s "$WORK/results.tgz")" -gt $((15 * 1024 * 1024)) ]; then
  (cd "$OUT" && split -b 15m "$WORK/results.tgz" results.tgz.part-)
else
  cp "$WORK/results.tgz" "$OUT/"
fi
ls -la "$OUT"
[ -f "$WORK/cupti.done" ] && echo "CUPTI PROOF DONE"
[ -f "$WORK/finished" ] && echo "CAMPAIGN FINISHED: $(cat "$WORK/finished")" || echo "STILL RUNNING"
