"""A small Llama-architecture GGUF with random weights and the real Llama-3 vocabulary.

Nothing is downloaded: the vocabulary comes from the pinned llama.cpp source's
`models/ggml-vocab-llama-bpe.gguf` (or `$PERFLIB_VOCAB_GGUF`), and every token the server decodes
goes through a real tokenizer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from perflib.errors import PerflibError
from perflib.server.build import download_source
from perflib.server.cache import cache_dir, locked
from perflib.server.engines import ensure_engine

LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)



@dataclass(frozen=True)
class ModelShape:
    """Shape of the generated Llama model; defaults are small enough for 2 CPU cores."""

    n_layer: int = 2
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 512
    context_length: int = 32768
    seed: int = 0
    quant: str = "f16"  # "f16", or "q4_0": random 4-bit blocks with a fixed sane scale

    @property
    def name(self) -> str:
        return (f"llama-random-L{self.n_layer}-E{self.n_embd}-H{self.n_head}-KV{self.n_head_kv}"
                f"-F{self.n_ff}-s{self.seed}-{self.quant}")


LLAMA31_8B = {"n_layer": 32, "n_embd": 4096, "n_head": 32, "n_head_kv": 8, "n_ff": 14336,
              "context_length": 131072}
"""Llama-3.1-8B's shape; with quant="q4_0" a 4.5 GB file, written without any download."""


def _import_gguf() -> None:
    """Make `gguf` importable: the installed package, else the copy in the llama.cpp source
    (`gguf-py/`), as on a GPU box where nothing can be installed."""
    try:
        import gguf  # noqa: F401 - late: the probe, before llama.cpp's gguf-py goes on the path
    except ImportError:
        path = download_source(progress=False) / "gguf-py"
        if not path.is_dir():
            raise PerflibError("writing a GGUF needs the gguf package: pip install gguf, or a llama.cpp source "
                               f"with gguf-py/ ({path} is missing)") from None
        sys.path.insert(0, str(path))


def _copy_tokenizer(writer, vocab_path: Path) -> int:
    """Copy every `tokenizer.*` key of a vocab GGUF into `writer`; returns the vocabulary size."""
    _import_gguf()
    from gguf import GGUFReader, GGUFValueType  # after _import_gguf: maybe llama.cpp's gguf-py

    reader = GGUFReader(str(vocab_path))
    n_vocab = 0
    for key, fld in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = fld.contents()
        vtype = fld.types[0]
        if vtype == GGUFValueType.ARRAY:
            writer.add_array(key, value)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            writer.add_key_value(key, value, vtype)
    if n_vocab == 0:
        raise PerflibError(f"{vocab_path}: expected a tokenizer.ggml.tokens array")
    return n_vocab


def write_random_llama_gguf(path: Path, shape: ModelShape, vocab_path: Path) -> Path:
    """Write a Llama-architecture GGUF with random weights and the vocabulary of `vocab_path`.

    f16 weights are Gaussian with 1/sqrt(fan-in) scale. Q4_0 weights are random nibbles under a
    fixed fp16 scale of 0.003 (random scales give fp16 NaN/Inf), written as raw 18-byte blocks.
    """
    import numpy as np  # late: only where a model is written; perflib.server does not load numpy

    _import_gguf()
    from gguf import GGMLQuantizationType, GGUFWriter  # after _import_gguf: maybe llama.cpp's gguf-py

    if shape.quant not in ("f16", "q4_0"):
        raise PerflibError(f"model quant {shape.quant!r}: expected 'f16' or 'q4_0'")
    q4_scale = np.frombuffer(np.float16(0.003).tobytes(), dtype=np.uint8)

    rng = np.random.default_rng(shape.seed)
    head_dim = shape.n_embd // shape.n_head
    n_embd_kv = head_dim * shape.n_head_kv
    tmp = path.with_suffix(".tmp")
    writer = GGUFWriter(str(tmp), "llama")
    writer.add_name(shape.name)
    n_vocab = _copy_tokenizer(writer, vocab_path)
    writer.add_string("tokenizer.chat_template", LLAMA3_CHAT_TEMPLATE)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(2 if shape.quant == "q4_0" else 1)  # MOSTLY_Q4_0 or MOSTLY_F16

    def add_weight(name: str, rows: int, cols: int) -> None:
        if shape.quant == "q4_0":
            blocks = rng.integers(0, 256, size=(rows, cols // 32, 18), dtype=np.uint8)
            blocks[:, :, :2] = q4_scale
            writer.add_tensor(name, blocks.reshape(rows, cols // 32 * 18),
                              raw_dtype=GGMLQuantizationType.Q4_0)
        else:
            scale = 1.0 / np.sqrt(cols)
            writer.add_tensor(name, (rng.standard_normal((rows, cols), dtype=np.float32) * scale)
                              .astype(np.float16))

    ones = np.ones(shape.n_embd, dtype=np.float32)
    add_weight("token_embd.weight", n_vocab, shape.n_embd)
    for i in range(shape.n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        add_weight(f"blk.{i}.attn_q.weight", shape.n_embd, shape.n_embd)
        add_weight(f"blk.{i}.attn_k.weight", n_embd_kv, shape.n_embd)
        add_weight(f"blk.{i}.attn_v.weight", n_embd_kv, shape.n_embd)
        add_weight(f"blk.{i}.attn_output.weight", shape.n_embd, shape.n_embd)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        add_weight(f"blk.{i}.ffn_gate.weight", shape.n_ff, shape.n_embd)
        add_weight(f"blk.{i}.ffn_up.weight", shape.n_ff, shape.n_embd)
        add_weight(f"blk.{i}.ffn_down.weight", shape.n_embd, shape.n_ff)
    writer.add_tensor("output_norm.weight", ones)
    add_weight("output.weight", n_vocab, shape.n_embd)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def ensure_test_model(**shape: int | str) -> Path:
    """Path of a cached random-weight Llama GGUF of the given `ModelShape` fields."""
    spec = ModelShape(**shape)
    path = cache_dir() / "models" / f"{spec.name}.gguf"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked("model"):
        if not path.is_file():
            # PERFLIB_VOCAB_GGUF lets a machine without the sdist (the GPU box) name a vocab file.
            vocab_env = os.environ.get("PERFLIB_VOCAB_GGUF")
            vocab = Path(vocab_env) if vocab_env else (
                download_source(progress=False) / "models" / "ggml-vocab-llama-bpe.gguf")
            write_random_llama_gguf(path, spec, vocab)
    return path


def vocab_gguf() -> Path:
    """llama.cpp's Llama-3 vocabulary: `$PERFLIB_VOCAB_GGUF`, else the pinned source's
    `models/ggml-vocab-llama-bpe.gguf` (the sdist the llama-server build downloads)."""
    vocab_env = os.environ.get("PERFLIB_VOCAB_GGUF")
    return Path(vocab_env) if vocab_env else download_source(progress=False) / "models" / "ggml-vocab-llama-bpe.gguf"


def hf_model_name(spec: ModelShape) -> str:
    return spec.name.rsplit("-", 1)[0] + "-bf16-hf"


def ensure_hf_model(engine: str = "vllm-cpu", progress: bool = False, **shape: int | str) -> Path:
    """Path of a cached random-weight Llama in Hugging Face form (bf16 safetensors, config.json, the real
    Llama-3 tokenizer), for vLLM and other PyTorch engines. Written by the engine's venv Python
    (`perflib.server.hfwrite`: perflib's environment has no torch), installing the engine first where
    it is not; about 50 s on a loaded 2-core machine, mostly the tokenizer's conversion."""
    spec = ModelShape(**shape)
    path = cache_dir() / "models" / hf_model_name(spec)
    if (path / "config.json").is_file():
        return path
    python = ensure_engine(engine, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked("model-hf"):
        if not (path / "config.json").is_file():
            vocab = vocab_gguf()
            if not vocab.is_file():
                raise PerflibError(f"{vocab}: the Llama-3 vocabulary GGUF is missing (set PERFLIB_VOCAB_GGUF)")
            args = {"out": str(path), "vocab": str(vocab),
                    "shape": {k: getattr(spec, k) for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "n_ff",
                                                            "context_length", "seed")}}
            if progress:
                print(f"perflib: writing {path.name} with {python} (about a minute)", file=sys.stderr, flush=True)
            done = subprocess.run([str(python), str(Path(__file__).with_name("hfwrite.py")), json.dumps(args)],
                                  capture_output=True, text=True, check=False, timeout=1800)
            if done.returncode != 0 or not (path / "config.json").is_file():
                raise PerflibError(f"writing the Hugging Face model {path} with {python} failed (exit "
                                   f"{done.returncode}): {(done.stderr or done.stdout).strip()[-1500:]}")
    return path
