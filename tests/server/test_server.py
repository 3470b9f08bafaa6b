"""The project's own llama-server: the generated model and a real server process."""

from __future__ import annotations

import httpx
import pytest

from perflib import server
from perflib.errors import PerflibError

pytestmark = pytest.mark.server


def test_generated_model_is_llama_with_real_vocab(tiny_model):
    from gguf import GGUFReader

    reader = GGUFReader(str(tiny_model))
    assert reader.fields["general.architecture"].contents() == "llama"
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert len(tokens) == 128256  # the Llama-3 BPE vocabulary, copied from the sdist
    names = {t.name for t in reader.tensors}
    assert {"token_embd.weight", "output.weight", "blk.0.attn_q.weight", "blk.1.ffn_down.weight"} <= names


def test_ctx_size_gives_every_slot_its_context():
    assert server.ctx_size_for(4, 1024, 128, margin=0) == 4 * 1152


def test_server_starts_tokenizes_and_decodes_full_length(llama_server_binary, tiny_model, tmp_path):
    log = tmp_path / "server.log"
    with server.start_llama_server(tiny_model, parallel=2, ctx_size=2048, log_path=log) as handle:
        assert handle.base_url.startswith("http://127.0.0.1:")
        tokens = httpx.post(f"{handle.base_url}/tokenize", json={"content": "Hello world"}).json()["tokens"]
        assert len(tokens) == 2  # "Hello", " world" in the Llama-3 vocabulary
        body = {"prompt": "Hello world", "max_tokens": 16, "ignore_eos": True, "temperature": 0}
        out = httpx.post(f"{handle.base_url}/v1/completions", json=body, timeout=60).json()
        assert out["usage"]["completion_tokens"] == 16
        assert out["timings"]["predicted_n"] == 16
        metrics = httpx.get(f"{handle.base_url}/metrics").text
        assert "llamacpp:tokens_predicted_total 16" in metrics
        assert "--metrics" in handle.flags
    assert not handle.alive()
    assert log.stat().st_size > 0


def test_without_metrics_flag_the_endpoint_answers_501(llama_server_binary, tiny_model, tmp_path):
    with server.start_llama_server(tiny_model, parallel=1, ctx_size=512, log_path=tmp_path / "s.log",
                                   metrics=False) as handle:
        resp = httpx.get(f"{handle.base_url}/metrics")
    assert resp.status_code == 501
    assert resp.json()["error"]["type"] == "not_supported_error"
    assert "--metrics" in resp.json()["error"]["message"]


def test_a_server_that_cannot_start_names_its_log(llama_server_binary, tmp_path):
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"not gguf")
    with pytest.raises(PerflibError, match=r"exited before it was healthy \(exit code \d+;") as raised:
        server.start_llama_server(bogus, parallel=1, ctx_size=512, log_path=tmp_path / "s.log", health_timeout=30)
    message = str(raised.value)  # one line that ends with the log's cause, not at "...s.log:" (issue 21)
    assert "\n" not in message and message.endswith(f"(log {tmp_path / 's.log'})")
    assert any(word in message.lower() for word in ("error", "fail", "invalid")), message
