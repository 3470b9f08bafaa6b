"""A short CUDA workload for the CUPTI injection sample: a few eager decode steps of the 1B Llama.

Why: `cupti_trace_injection` prints every activity record of the process to stdout; this
workload keeps that output small and about decode. It builds the same random-weight Llama as
`capture_pytorch_decode.py`, prefills a batch-1 prompt, then (with `--gate`) brackets only the
traced part with cudaProfilerStart/Stop, which the sample uses to switch collection on and off:
a CUDA-graph replay of a small matmul chain (so the text has graphId/graphNodeId records, as
llama.cpp's does), then `--steps` decode steps. Everything this script prints goes to stderr, so
stdout holds only the sample's text. Run it once without the injection for the baseline step time.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture_pytorch_decode import LLAMA_1B, TINY  # noqa: E402


def log(obj) -> None:
    print(json.dumps(obj) if not isinstance(obj, str) else obj, file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--graph-replays", type=int, default=3, help="0: no graph captured")
    p.add_argument("--gate", action="store_true", help="collect only around the traced part")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--label", default="run")
    args = p.parse_args()

    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    libc = ctypes.CDLL(None)
    cudart = torch.cuda.cudart()
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # context exists from here on
    if args.gate:
        cudart.cudaProfilerStop()  # sample flushes what it has and stops collecting
        libc.fflush(None)
    cfg = TINY if args.tiny else LLAMA_1B
    config = LlamaConfig(**cfg)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model = model.to(torch.bfloat16).eval()
    gen = torch.Generator(device="cpu").manual_seed(1)
    prompt = torch.randint(0, config.vocab_size, (args.batch, args.context), generator=gen).cuda()
    cache = DynamicCache()

    # A CUDA graph of a small matmul chain, captured now, replayed inside the traced window.
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            y = torch.relu(a @ w) + a
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    if args.graph_replays:
        with torch.cuda.graph(graph):
            y = a
            for _ in range(4):
                y = torch.relu(y @ w) + a

    with torch.inference_mode():
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        tok = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)

        def step(tok):
            o = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
            return o.logits[:, -1, :].argmax(dim=-1, keepdim=True)

        for _ in range(3):
            tok = step(tok)
        torch.cuda.synchronize()
        libc.fflush(None)
        t_start = time.time_ns()
        if args.gate:
            cudart.cudaProfilerStart()
        for _ in range(args.graph_replays):
            graph.replay()
        torch.cuda.synchronize()
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)]
        evs[0].record()
        for i in range(args.steps):
            tok = step(tok)
            evs[i + 1].record()
        torch.cuda.synchronize()
        if args.gate:
            cudart.cudaProfilerStop()
        t_end = time.time_ns()
        libc.fflush(None)
    ms = [evs[i].elapsed_time(evs[i + 1]) for i in range(args.steps)]
    log({"cupti_workload": args.label, "batch": args.batch, "context": args.context,
         "steps": args.steps, "graph_replays": args.graph_replays, "gate": args.gate,
         "step_ms": [round(x, 4) for x in ms], "step_ms_median": round(statistics.median(ms), 4),
         "window_realtime_ns": [t_start, t_end]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
