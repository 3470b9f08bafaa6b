"""A random-weight Llama in Hugging Face form (config.json, model.safetensors, tokenizer files), written by
the Python of an engine's venv (`perflib.server.engines`), which has torch and transformers.

perflib's own environment has neither, so `perflib.server.model.ensure_hf_model` runs this file as a
script in the engine's venv: `<venv>/bin/python hfwrite.py '<json>'`, the JSON giving the folder, the
shape and the vocabulary GGUF. It imports nothing of perflib. The tokenizer is llama.cpp's real Llama-3
vocabulary (`models/ggml-vocab-llama-bpe.gguf`), converted by transformers (it needs the `gguf`
package); nothing is downloaded (`HF_HUB_OFFLINE=1`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
"""Llama-3's chat template (the same as the GGUF model's, `perflib.server.model`)."""


def write(out: Path, shape: dict, vocab: Path) -> Path:
    """Write the model folder `out` whole (a temporary folder renamed at the end)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # late: this file runs in the engine's venv, whose torch and transformers perflib's own env lacks
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(vocab.parent), gguf_file=vocab.name)
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=shape["n_embd"], intermediate_size=shape["n_ff"],
        num_hidden_layers=shape["n_layer"], num_attention_heads=shape["n_head"],
        num_key_value_heads=shape["n_head_kv"], max_position_embeddings=shape["context_length"],
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, torch_dtype="bfloat16")
    torch.manual_seed(shape["seed"])
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    tmp = out.with_name(out.name + f".partial{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def main(argv: list[str]) -> int:
    args = json.loads(argv[1])
    out = write(Path(args["out"]), args["shape"], Path(args["vocab"]))
    print(json.dumps({"model": str(out), "bytes": sum(p.stat().st_size for p in out.iterdir())}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
