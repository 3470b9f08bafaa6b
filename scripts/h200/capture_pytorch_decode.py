"""Kineto traces of batched decode of a random-weight Llama (1B shape) with a manual KV-cache loop.

Why: perflib's trace readers and step segmentation need real PyTorch-profiler output of decode
on a CUDA GPU, with a known number of `ProfilerStep#N` annotations (one per decode step).

For each (batch, context): prefill the random prompt in chunks, run warm-up decode steps, time
`--plain-steps` unprofiled decode steps (CUDA events per step, median), then profile
`--steps` decode steps with `torch.profiler` (CPU + CUDA activities) and export the Chrome trace,
gzipped, to OUT. The case named by `--full` is profiled for more steps, rescaled (at most three
tries) until its JSON is within 0.8-1.25x `--target-mb` MB, so one trace is a full-size (~30-40 MB) Kineto file.

Writes `capture.json` (one record per trace) to `--work`; `run_all.sh` merges it into the manifest.
Run with `--tiny --device cpu` for a dry run on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import math
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from perflib.clocks import now_clocks  # noqa: E402

LLAMA_1B = dict(  # Llama-3.2-1B shape (no download: config built here)
    vocab_size=128256,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    max_position_embeddings=131072,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)
TINY = dict(
    vocab_size=1024,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the .json.gz traces")
    p.add_argument("--work", type=Path, required=True, help="scratch folder (uncompressed JSON, capture.json)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    p.add_argument("--contexts", type=int, nargs="+", default=[1024, 16384], help="prompt tokens")
    p.add_argument("--steps", type=int, default=12, help="profiled decode steps of the short traces")
    p.add_argument("--full", default="4x1024", help="BATCHxCONTEXT of the full-size trace")
    p.add_argument("--full-steps", type=int, default=20, help="first try of profiled steps for the full trace")
    p.add_argument("--target-mb", type=float, default=35.0, help="uncompressed size sought for the full trace")
    p.add_argument("--max-full-steps", type=int, default=96)
    p.add_argument("--plain-steps", type=int, default=24, help="unprofiled decode steps timed per case")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--prefill-chunk", type=int, default=4096)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny config for a CPU dry run")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


class StepTimer:
    """Per-step device time: CUDA events on a GPU, perf_counter after a no-op on CPU."""

    def __init__(self, torch, device: str) -> None:
        self.torch = torch
        self.cuda = device.startswith("cuda")
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def step_ms(self) -> list[float]:
        if self.cuda:
            self.torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:], strict=False)]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:], strict=False)]


def sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def trace_header_fields(path: Path) -> dict:
    """baseTimeNanoseconds and the GPU name, read from the ends of the exported JSON (no full parse)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(65536).decode("utf-8", "replace")
        f.seek(max(0, size - 65536))
        tail = f.read().decode("utf-8", "replace")
    out: dict = {"baseTimeNanoseconds": None, "trace_device_name": None}
    m = re.search(r'"baseTimeNanoseconds"\s*:\s*(\d+)', tail) or re.search(r'"baseTimeNanoseconds"\s*:\s*(\d+)', head)
    if m:
        out["baseTimeNanoseconds"] = int(m.group(1))
    m = re.search(r'"deviceProperties"\s*:\s*\[\s*\{[^}]*?"name"\s*:\s*"([^"]+)"', head)
    if m:
        out["trace_device_name"] = m.group(1)
    return out


def main() -> int:
    args = parse_args()
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile, schedule
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    dev = args.device
    cfg_kwargs = TINY if args.tiny else LLAMA_1B
    config = LlamaConfig(**cfg_kwargs)
    dtype = torch.bfloat16
    torch.manual_seed(args.seed)

    t0 = time.perf_counter()
    torch.set_default_dtype(dtype)
    with torch.device(dev):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model = model.to(dtype).eval()
    sync(torch, dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model built on {dev} in {time.perf_counter() - t0:.1f} s: {n_params / 1e9:.3f} G params, "
          f"attn_implementation={model.config._attn_implementation}", flush=True)

    env = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if dev.startswith("cuda") else None,
        "gpu": torch.cuda.get_device_name(0) if dev.startswith("cuda") else None,
        "python": sys.version.split()[0],
        "attn_implementation": model.config._attn_implementation,
    }
    full_b, full_c = (int(x) for x in args.full.lower().split("x"))
    records: list[dict] = []
    capture_path = args.work / "capture.json"

    def write_capture() -> None:
        capture_path.write_text(json.dumps({"environment": env, "model_params": n_params,
                                            "command": "python3 " + " ".join(sys.argv),
                                            "model_config": cfg_kwargs, "dtype": "bfloat16",
                                            "traces": records}, indent=2))

    for context in args.contexts:
        for batch in args.batches:
            is_full = (batch, context) == (full_b, full_c)
            name = f"llama1b_decode_b{batch}_c{context}"
            print(f"--- {name} (full={is_full})", flush=True)
            rec: dict = {"batch": batch, "context": context, "full": is_full}
            try:
                rec.update(run_case(torch, model, config, args, dev, batch, context, is_full, name,
                                    profile, schedule, ProfilerActivity, DynamicCache))
                rec["status"] = "ok"
            except Exception as exc:  # keep the other cases going
                import traceback

                traceback.print_exc()
                rec["status"] = "failed"
                rec["error"] = f"{type(exc).__name__}: {exc}"
                if dev.startswith("cuda"):
                    torch.cuda.empty_cache()
            records.append(rec)
            write_capture()
            print(json.dumps(rec), flush=True)
    return 0 if all(r["status"] == "ok" for r in records) else 1


def run_case(torch, model, config, args, dev, batch, context, is_full, name, profile, schedule,
             ProfilerActivity, DynamicCache) -> dict:
    gen = torch.Generator(device="cpu").manual_seed(args.seed + batch * 100003 + context)
    prompt = torch.randint(0, config.vocab_size, (batch, context), generator=gen).to(dev)
    cache = DynamicCache()
    rec: dict = {"prompt_tokens": context}
    with torch.inference_mode():
        # Prefill in chunks so attention never materialises a context x context score matrix.
        sync(torch, dev)
        t0 = time.perf_counter()
        logits = None
        for s in range(0, context, args.prefill_chunk):
            out = model(input_ids=prompt[:, s:s + args.prefill_chunk], past_key_values=cache,
                        use_cache=True, logits_to_keep=1)
            logits = out.logits
        sync(torch, dev)
        rec["prefill_s"] = round(time.perf_counter() - t0, 4)
        tok = logits[:, -1, :].argmax(dim=-1, keepdim=True)

        def step(tok):
            out = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
            return out.logits[:, -1, :].argmax(dim=-1, keepdim=True)

        for _ in range(args.warmup):
            tok = step(tok)
        sync(torch, dev)

        # Plain (unprofiled) decode: per-step device time by events, and wall time over all steps.
        timer = StepTimer(torch, dev)
        t0 = time.perf_counter()
        timer.mark()
        for _ in range(args.plain_steps):
            tok = step(tok)
            timer.mark()
        plain = timer.step_ms()
        plain_wall = (time.perf_counter() - t0) * 1e3 / args.plain_steps
        rec["plain_steps"] = args.plain_steps
        rec["plain_step_ms_median"] = round(statistics.median(plain), 4)
        rec["plain_step_ms_min"] = round(min(plain), 4)
        rec["plain_step_ms_max"] = round(max(plain), 4)
        rec["plain_step_ms_mean_wall"] = round(plain_wall, 4)

        steps = args.full_steps if is_full else args.steps
        json_path = args.work / f"{name}.json"
        attempts = []
        while True:
            rec["kv_tokens_at_profile_start"] = cache.get_seq_length()
            # torch.profiler writes ProfilerStep#N only when given a schedule: one warm-up step
            # (not recorded), then `steps` recorded steps ProfilerStep#1..#steps.
            sched = schedule(wait=0, warmup=1, active=steps, repeat=1)
            export: dict = {}

            def on_ready(p, export=export):
                t1 = time.perf_counter()
                p.export_chrome_trace(str(json_path))
                export["s"] = time.perf_counter() - t1

            sync(torch, dev)
            marks: list[float] = []
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                         on_trace_ready=on_ready, record_shapes=False, with_stack=False) as prof:
                for i in range(steps + 1):
                    tok = step(tok)
                    if i == steps:
                        sync(torch, dev)  # inside the last recorded step's annotation
                        marks.append(time.perf_counter())
                        clocks_end = now_clocks()
                    if i == 0:
                        sync(torch, dev)  # inside the warm-up step, which is not recorded
                        clocks_start = now_clocks()
                        marks.append(time.perf_counter())
                    prof.step()  # closes ProfilerStep#i; after the last one the trace is saved
            prof_wall = (marks[1] - marks[0]) * 1e3  # recorded steps only, ms
            export_s = export.get("s", float("nan"))
            size_mb = json_path.stat().st_size / 1e6
            attempts.append({"steps": steps, "json_mb": round(size_mb, 2), "export_s": round(export_s, 2)})
            print(f"profiled {steps} steps: {prof_wall / steps:.2f} ms/step wall, {size_mb:.1f} MB JSON, "
                  f"export {export_s:.1f} s", flush=True)
            in_range = 0.8 * args.target_mb <= size_mb <= 1.25 * args.target_mb
            if not is_full or in_range or len(attempts) >= 3 or steps >= args.max_full_steps:
                break
            steps = min(args.max_full_steps, math.ceil(steps * args.target_mb / max(size_mb, 0.01)))
            del prof
        rec["decode_steps"] = steps
        rec["profile_attempts"] = attempts
        rec["profiled_step_ms_mean_wall"] = round(prof_wall / steps, 4)
        rec["profiler_slowdown_wall"] = round(prof_wall / steps / plain_wall, 3)
        rec["json_bytes"] = json_path.stat().st_size
        rec["clocks"] = {"start": clocks_start, "end": clocks_end}
        rec.update(trace_header_fields(json_path))
        gz_path = args.out / f"{name}.json.gz"
        with json_path.open("rb") as src, gzip.open(gz_path, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        rec["file"] = gz_path.name
        rec["gz_bytes"] = gz_path.stat().st_size
        rec["date_utc"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        json_path.unlink()
    if dev.startswith("cuda"):
        torch.cuda.empty_cache()
    return rec


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
