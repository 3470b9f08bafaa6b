#!/usr/bin/env bash
# One device-tool call: start llama_campaign.sh in its own session if it is not running yet,
# wait up to BUDGET seconds for it, then put what exists into $OUT (partial results too).
# Run it again in the next call (within the machine's 30 s warm window) to continue.
set -u
BUDGET=${1:-560}
WORK=/tmp/h200
mkdir -p "$WORK"
if [ ! -f "$WORK/campaign.pid" ] || ! kill -0 "$(cat "$WORK/campaign.pid")" 2>/dev/null; then
  if ! grep -q "all steps finished" "$WORK/campaign.log" 2>/dev/null; then
    setsid nohup bash scripts/h200/llama_campaign.sh "$WORK" >> "$WORK/campaign.log" 2>&1 < /dev/null &
    echo $! > "$WORK/campaign.pid"
  fi
fi
t0=$(date +%s)
while kill -0 "$(cat "$WORK/campaign.pid")" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$BUDGET" ]; do sleep 5; done
cat "$WORK/campaign.log"
tail -3 "$WORK"/*.sweep.log 2>/dev/null
{ tail -50 "$WORK/build.log"; cat "$WORK/gpu.txt" "$WORK/bandwidth.json" "$WORK/cut.log"; } > "$OUT/logs.txt" 2>&1
cat "$WORK"/*.sweep.log > "$OUT/sweeps.txt" 2>/dev/null
if [ -f "$WORK/traced.done" ] && [ -f "$WORK/traced.server.log.cupti" ]; then  # the whole trace, if it fits the 16 MiB limit
  gzip -1 -c "$WORK/traced.server.log.cupti" > "$WORK/cupti.txt.gz"
  [ "$(stat -c %s "$WORK/cupti.txt.gz")" -lt 16000000 ] && cp "$WORK/cupti.txt.gz" "$OUT/"
fi
[ -d "$WORK/raw" ] && tar czf "$OUT/raw.tgz" -C "$WORK" raw && ls -la "$OUT"
kill -0 "$(cat "$WORK/campaign.pid")" 2>/dev/null && echo "STILL RUNNING" || echo "CAMPAIGN FINISHED"
