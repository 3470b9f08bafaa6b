"""Merge the pieces one H200 run wrote (capture, bandwidth, CUPTI log, probe) into manifest.json.

Why: the device call brings back at most 8 files, so the small JSON pieces are folded into one
manifest there; `verify_traces.py` later adds the counts read back from the traces themselves.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from pathlib import Path


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"{path}: not read ({exc})")
        return None


def probe_facts(path: Path) -> dict:
    """A few lines of the probe worth having in the manifest (the full text is probe.txt)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    facts: dict = {}
    m = re.search(r"Driver Version:\s*([\d.]+)\s+CUDA Version:\s*([\d.]+)", text)
    if m:
        facts["driver"], facts["cuda_driver_api"] = m.group(1), m.group(2)
    m = re.search(r"release ([\d.]+), (V[\d.]+)", text)
    if m:
        facts["nvcc"] = m.group(2)
    return facts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--capture", type=Path, required=True)
    p.add_argument("--bandwidth", type=Path, required=True)
    p.add_argument("--cupti-log", type=Path, required=True)
    p.add_argument("--probe", type=Path, required=True)
    p.add_argument("--device-command", default=None)
    args = p.parse_args()

    cap = read_json(args.capture) or {}
    env = cap.get("environment", {})
    traces = []
    for rec in cap.get("traces", []):
        rec = dict(rec)
        rec.update({
            "model_config": cap.get("model_config"),
            "dtype": cap.get("dtype"),
            "torch": env.get("torch"),
            "transformers": env.get("transformers"),
            "cuda": env.get("cuda"),
            "gpu": env.get("gpu"),
            "command": cap.get("command"),
        })
        traces.append(rec)
    cupti_runs = []
    try:
        for line in args.cupti_log.read_text(errors="replace").splitlines():
            if line.startswith('{"cupti_workload"'):
                cupti_runs.append(json.loads(line))
    except (OSError, ValueError) as exc:
        print(f"{args.cupti_log}: {exc}")
    manifest = {
        "schema": 1,
        "what": "PyTorch profiler (Kineto) traces of eager batched decode, random-weight Llama-3.2-1B shape, H200",
        "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device_command": args.device_command,
        "environment": env,
        "machine": probe_facts(args.probe),
        "model": {
            "architecture": "LlamaForCausalLM",
            "config": cap.get("model_config"),
            "params": cap.get("model_params"),
            "dtype": cap.get("dtype"),
            "weights": "random (transformers init, torch.manual_seed(0)); prompts random token ids",
        },
        "bandwidth": read_json(args.bandwidth),
        "traces": traces,
        "cupti_sample": {"workload_runs": cupti_runs},
    }
    args.out.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {args.out}: {len(traces)} traces, bandwidth "
          f"{(manifest['bandwidth'] or {}).get('gb_per_s_median')} GB/s, {len(cupti_runs)} CUPTI workload runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
