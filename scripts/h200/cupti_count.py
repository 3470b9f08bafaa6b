"""Count the records of a CUPTI activity text (perflib's library or the CUDA sample) and compare the
kernels, copies and memsets with what cupti_decode_like launched: cupti_count.py FILE [EAGER GRAPH]."""
import json
import re
import sys
from collections import Counter

path = sys.argv[1]
kinds, graph_kernels, nodes, graph_ids = Counter(), 0, set(), Counter()
current = None
zero_start = 0
head = re.compile(r"^([A-Z_]+)[ \"]")
with open(path, "rb") as fh:
    for raw in fh:
        line = raw.decode("utf-8", "replace")
        if line.startswith("\t"):
            if current in ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET") and "graphId" in line:
                m = re.search(r"graphId (\d+), graphNodeId (\d+)", line)
                if m and int(m[1]) > 0:
                    graph_ids[current] += 1
                    if current == "CONCURRENT_KERNEL":
                        nodes.add((m[1], m[2]))
            continue
        m = head.match(line)
        current = m[1] if m and "[ " in line else None
        if current:
            kinds[current] += 1
            if "[ 0," in line:
                zero_start += 1
out = {"file": path, "records_by_kind": dict(kinds), "records": sum(kinds.values()),
       "graph_launched": dict(graph_ids), "distinct_graph_kernel_nodes": len(nodes), "zero_start": zero_start}
if len(sys.argv) > 3:
    e, g = int(sys.argv[2]), int(sys.argv[3])
    expected = {"CONCURRENT_KERNEL": 34 * (e + g), "graph kernels": 34 * g, "MEMCPY": 1 + 2 * (e + g),
                "MEMSET": 3 + e + g}
    got = {"CONCURRENT_KERNEL": kinds["CONCURRENT_KERNEL"], "graph kernels": graph_ids["CONCURRENT_KERNEL"],
           "MEMCPY": kinds["MEMCPY"], "MEMSET": kinds["MEMSET"]}
    out["expected"], out["got"] = expected, got
    out["all_there"] = expected == got
print(json.dumps(out))
