"""Device-to-device copy bandwidth through torch: the memory ceiling for a decode-step floor.

Copies a `--gib` GiB tensor into another on the same GPU `--reps` times (after warm-ups), each
timed with CUDA events; bandwidth counts bytes read plus bytes written (2 x size per copy), in
decimal GB/s. Writes a JSON record to `--json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--gib", type=float, default=4.0)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    import torch

    n = int(args.gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device=args.device).random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(args.warmup):
        dst.copy_(src)
    cuda = args.device.startswith("cuda")
    times_ms: list[float] = []
    for _ in range(args.reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src)
            b.record()
            b.synchronize()
            times_ms.append(a.elapsed_time(b))
        else:
            import time

            t0 = time.perf_counter()
            dst.copy_(src)
            times_ms.append((time.perf_counter() - t0) * 1e3)
    ok = bool(torch.equal(dst[:1 << 20], src[:1 << 20]))
    moved = 2 * n  # read + write
    gbps = [moved / (t * 1e-3) / 1e9 for t in times_ms]
    rec = {
        "method": "torch Tensor.copy_ device-to-device, CUDA events, bytes read + written",
        "bytes_per_copy": n,
        "bytes_counted_per_copy": moved,
        "reps": args.reps,
        "warmup": args.warmup,
        "copy_ms": [round(t, 4) for t in times_ms],
        "gb_per_s_median": round(statistics.median(gbps), 1),
        "gb_per_s_max": round(max(gbps), 1),
        "gb_per_s_min": round(min(gbps), 1),
        "check_equal": ok,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rec, indent=2))
    print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
