"""Cut real CPU profiles small enough to commit as test samples (tests/data/traces/README.md).

    python scripts/cpu/cut_samples.py perf PERF_SCRIPT_TXT START_NS END_NS OUT.txt.gz
    python scripts/cpu/cut_samples.py kineto RANK0.pt.trace.json.gz OUT.json.gz

`perf`: `perf script --header` text whose samples were taken in [START_NS, END_NS) (the time on each
sample line), the header kept, the samples as perf printed them, gzipped.

`kineto`: a vLLM CPU worker's Kineto trace with its python ranges thinned: every event is kept but the
`python_function` events that are not the model's ranges (`_model_forward`, `compute_logits`,
`nn.Module: ...`), which a `with_stack` trace holds by the hundred thousand (vLLM's shared-memory
polling) and which perflib reads only for those ranges. Gzipped, keys as written.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

SAMPLE = re.compile(r"^\S.*?\s(?:-?\d+/)?-?\d+\s+(?:\[\d+\]\s+)?(\d+)\.(\d{1,9}):\s")
MODEL_RANGE = re.compile(r"\): (?:_model_forward|compute_logits)$|^nn\.Module: ")


def cut_perf(source: Path, start_ns: int, end_ns: int, out: Path) -> int:
    """Write the header and the samples taken in [start_ns, end_ns); return how many."""
    kept, keep, lines = 0, True, []
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rt", errors="replace") as handle:
        for line in handle:
            found = SAMPLE.match(line)
            if found:
                time_ns = int(found.group(1)) * 1_000_000_000 + int(found.group(2).ljust(9, "0"))
                keep = start_ns <= time_ns < end_ns
                kept += keep
            elif line.startswith("#") and not kept:
                keep = True
            if keep:
                lines.append(line)
    with gzip.open(out, "wt", compresslevel=9) as handle:
        handle.writelines(lines)
    return kept


def cut_kineto(source: Path, out: Path) -> int:
    """Write the trace without the python ranges that are not the model's; return the events kept."""
    with gzip.open(source, "rt") if source.name.endswith(".gz") else open(source) as handle:
        data = json.load(handle)
    data["traceEvents"] = [e for e in data["traceEvents"]
                           if e.get("cat") != "python_function" or MODEL_RANGE.search(str(e.get("name", "")))]
    with gzip.open(out, "wt", compresslevel=9) as handle:
        json.dump(data, handle)
    return len(data["traceEvents"])


def main(argv: list[str]) -> int:
    if argv[:1] == ["perf"] and len(argv) == 5:
        print(cut_perf(Path(argv[1]), int(argv[2]), int(argv[3]), Path(argv[4])), "samples kept")
        return 0
    if argv[:1] == ["kineto"] and len(argv) == 3:
        print(cut_kineto(Path(argv[1]), Path(argv[2])), "events kept")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
