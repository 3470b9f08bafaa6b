"""Read the committed H200 Kineto traces back with plain gzip+json and record what they hold.

Why: the manifest must say, from the files themselves, how many kernels and `ProfilerStep#N`
annotations each trace has (step segmentation is tested against that count), and how the
profiled step time in the trace compares with the unprofiled one measured beside it.
Adds to each trace record in manifest.json: `kernels`, `steps`, `step_names`, `cpu_ops`,
`cuda_runtime`, `gpu_memcpy`, `gpu_memset`, `gpu_user_annotations`, `trace_step_ms_median`
(median ProfilerStep# duration), `gpu_busy_share_in_steps` (union of kernel intervals inside
the steps over the steps' span), `first_step_unix_ns` (ts*1000 + baseTimeNanoseconds) and
`unix_minus_realtime_ms` (that minus the CLOCK_REALTIME read just before the recorded steps).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path


def union_ms(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length (in the intervals' unit) of the union of intervals clipped to [lo, hi]."""
    total, end = 0.0, lo
    for s, e in sorted(intervals):
        s, e = max(s, end), min(e, hi)
        if e > s:
            total += e - s
            end = e
    return total


def check(path: Path, rec: dict) -> dict:
    doc = json.load(gzip.open(path, "rt"))
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    by_cat: dict[str, list[dict]] = {}
    for e in ev:
        by_cat.setdefault(e.get("cat", ""), []).append(e)
    steps = sorted((e for e in by_cat.get("user_annotation", []) if e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    kernels = by_cat.get("kernel", [])
    out = {
        "kernels": len(kernels),
        "steps": len(steps),
        "step_names": [steps[0]["name"], steps[-1]["name"]] if steps else [],
        "cpu_ops": len(by_cat.get("cpu_op", [])),
        "cuda_runtime": len(by_cat.get("cuda_runtime", [])),
        "gpu_memcpy": len(by_cat.get("gpu_memcpy", [])),
        "gpu_memset": len(by_cat.get("gpu_memset", [])),
        "gpu_user_annotations": len(by_cat.get("gpu_user_annotation", [])),
        "baseTimeNanoseconds": doc.get("baseTimeNanoseconds"),
        "device_properties_name": (doc.get("deviceProperties") or [{}])[0].get("name"),
    }
    if steps:
        durs_ms = [e["dur"] / 1e3 for e in steps]
        out["trace_step_ms_median"] = round(statistics.median(durs_ms), 3)
        lo, hi = steps[0]["ts"], max(e["ts"] + e["dur"] for e in steps)
        busy = union_ms([(k["ts"], k["ts"] + k["dur"]) for k in kernels], lo, hi)
        out["gpu_busy_share_in_steps"] = round(busy / (hi - lo), 4)
        out["kernels_per_step"] = round(sum(1 for k in kernels if lo <= k["ts"] < hi) / len(steps), 1)
        base = doc.get("baseTimeNanoseconds")
        if base is not None:
            out["first_step_unix_ns"] = int(round(steps[0]["ts"] * 1000)) + int(base)
            real = (rec.get("clocks") or {}).get("start", {}).get("realtime_ns")
            if real:
                out["unix_minus_realtime_ms"] = round((out["first_step_unix_ns"] - real) / 1e6, 3)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="data/raw/h200-pytorch")
    p.add_argument("--write", action="store_true", help="update manifest.json in place")
    args = p.parse_args()
    mpath = args.folder / "manifest.json"
    manifest = json.loads(mpath.read_text())
    for rec in manifest["traces"]:
        path = args.folder / rec["file"]
        got = check(path, rec)
        rec.update(got)
        rec["gz_bytes"] = path.stat().st_size
        print(f"{rec['file']}: {got['kernels']} kernels, {got['steps']} steps {got['step_names']}, "
              f"trace step {got.get('trace_step_ms_median')} ms vs plain {rec.get('plain_step_ms_median')} ms, "
              f"GPU busy {got.get('gpu_busy_share_in_steps')}, unix-realtime {got.get('unix_minus_realtime_ms')} ms")
    if args.write:
        mpath.write_text(json.dumps(manifest, indent=2) + "\n")
        print(f"updated {mpath}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
