"""`LevelSpec`: everything a level needs in one typed record, through JSON and back (the collect
notebook's one parameter), refused with the field named where it is wrong; `RequestSpec` likewise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perflib import load
from perflib.errors import InputError

SERVER = load.ServerInfo(("--port", "8080", "--metrics"), "/tmp/arm/server.log", "version: 11434 (b1e2)",
                         {"kind": "llama.cpp", "binary": "/bin/llama-server", "binary_sha256": "ab" * 32,
                          "commit": "b1e2", "model": "/m/tiny.gguf"}, 4242)


def full_spec(tmp_path: Path) -> load.LevelSpec:
    return load.LevelSpec("http://127.0.0.1:8080", 4, 256, 64, 2, out_dir=tmp_path / "runs", endpoint="chat",
                          dialect="llamacpp", model="tiny", ignore_eos=False, extra_body={"cache_prompt": False},
                          timeout=30.0, idle_timeout=None, workers=2, contention_threshold=None, wait_threshold=0.8,
                          psi_threshold=None, gauge_interval=0.25, scrape_metrics=False, campaign="demo",
                          arm="after", backend="cpu", server=SERVER)


def test_a_level_spec_goes_through_json_and_back_unchanged(tmp_path):
    spec = full_spec(tmp_path)
    text = spec.to_json()
    assert json.loads(text)["out_dir"] == str(tmp_path / "runs")  # plain JSON values
    assert load.LevelSpec.from_json(text) == spec
    assert load.LevelSpec.from_json(json.loads(text)) == spec
    assert load.LevelSpec.from_json(spec) is spec
    assert spec.run_dir == tmp_path / "runs" / "b4_c256_r2" and spec.name == "b4_c256_r2"


def test_fields_left_out_take_their_defaults():
    spec = load.LevelSpec.from_json({"base_url": "http://h:1", "batch": 1, "context": 8, "decode_tokens": 4,
                                     "repeat": 1})
    assert spec.contention_threshold == load.CPU_THRESHOLD and spec.contention
    assert spec.idle_timeout == load.DEFAULT_IDLE_TIMEOUT_S and spec.server is None
    assert spec.request_timeout == load.request_timeout_for(4)  # no timeout given: the default for 4 tokens
    assert not load.LevelSpec("u", 1, 8, 4, 1, contention_threshold=None).contention


@pytest.mark.parametrize("change, field, expected", [
    ({"batch": 0}, "batch", "a positive integer"),
    ({"batch": "4"}, "batch", "a positive integer"),
    ({"timeout": "soon"}, "timeout", "a finite number"),
    ({"ignore_eos": 1}, "ignore_eos", "true or false"),
    ({"colour": "red"}, "colour", "one of the level spec's fields"),
    ({"server": {"flags": "--metrics"}}, "flags", "a list of strings"),
    ({"server": {"port": 1}}, "server.port", "one of"),
    ({"endpoint": "embeddings"}, "endpoint", "one of completions, chat"),
])
def test_a_wrong_field_is_refused_with_its_name(change, field, expected):
    obj = {"base_url": "http://h:1", "batch": 1, "context": 8, "decode_tokens": 4, "repeat": 1, **change}
    with pytest.raises(InputError) as exc:
        load.LevelSpec.from_json(obj)
    assert f":{field}: expected {expected}" in str(exc.value)


def test_a_missing_field_and_text_that_is_not_json_are_refused():
    with pytest.raises(InputError, match="level:repeat: expected a value"):
        load.LevelSpec.from_json({"base_url": "u", "batch": 1, "context": 8, "decode_tokens": 4})
    with pytest.raises(InputError, match="level: expected a level spec as a JSON object, found text that is not JSON"):
        load.LevelSpec.from_json("{batch: 1")
    with pytest.raises(InputError, match="found a list"):
        load.LevelSpec.from_json([1, 2])


def test_each_request_carries_the_level(tmp_path):
    spec = full_spec(tmp_path)
    req = spec.request("b4_c256_r2-3", "the prompt", 64, 250, "tokenize")
    assert (req.base_url, req.endpoint, req.model, req.ignore_eos, req.timeout, req.idle_timeout) == (
        spec.base_url, "chat", "tiny", False, 30.0, None)
    assert (req.batch, req.context, req.repeat, req.prompt_tokens, req.prompt_tokens_method) == (4, 256, 2, 250,
                                                                                                 "tokenize")
    assert req.extra_body == {"cache_prompt": False} and req.extra_body is not spec.extra_body
    assert req.url == "http://127.0.0.1:8080/v1/chat/completions"
    assert load.RequestSpec.from_dict(json.loads(json.dumps(req.to_dict()))) == req  # a load worker's job


def test_server_info_of_a_started_server_and_what_the_manifest_gets():
    class Handle:
        flags = ["-m", "x.gguf"]
        log_path = Path("/tmp/s.log")
        pid = 99

        def identity(self) -> dict:
            return {"kind": "llama.cpp", "version": "v1", "flags": self.flags, "model": "x.gguf", "binary": "/b",
                    "binary_sha256": None, "commit": "c1"}

    info = load.ServerInfo.of(Handle())
    assert info.flags == ("-m", "x.gguf") and info.version == "v1" and info.pid == 99
    assert "flags" not in info.identity and "version" not in info.identity
    assert info.started() == {"binary": "/b", "commit": "c1", "preset": "llama.cpp", "model_file": "x.gguf"}
