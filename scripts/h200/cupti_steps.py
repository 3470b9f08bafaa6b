"""Median eager and graph step times (ms) of cupti_decode_like from its stderr, and the steps it did:
cupti_steps.py STDERR_FILE LABEL (scripts/h200/cupti_perflib.sh)."""
import json
import re
import statistics
import sys


def median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


eager, graph = [], []
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"(eager|graph) step (\d+): ([\d.]+) ms", line)
    if m:
        (eager if m[1] == "eager" else graph).append(float(m[3]))
print(json.dumps({"label": sys.argv[2], "eager_steps": len(eager), "graph_steps": len(graph),
                  "eager_ms_median": median(eager), "graph_ms_median": median(graph),
                  "eager_ms_sum": round(sum(eager), 1), "graph_ms_sum": round(sum(graph), 1)}))
