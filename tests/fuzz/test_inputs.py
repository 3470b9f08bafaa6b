"""Every input reader that is not a trace reader, fed mutated real inputs (issue 12): the `/metrics`
exposition parser, the run-folder manifest and records, the campaign loader and the SSE splitter with
the stream's event checks. The property, for each:

- it raises `PerflibError` (an `InputError` naming the file and place), or returns a result that passes
  its own checks again (the manifest's field kinds, a campaign's safe names and bounded matrix, SSE
  payloads equal to a plain split of the same bytes);
- it raises nothing else and finishes within `LIMIT_S` (a hang fails the example);
- nothing is written beside the input (each example has a folder of its own, compared before and after).

The budget is the `perflib-fuzz` profile (tests/fuzz/conftest.py): 30 examples per test in CI.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support import DATA, time_limit

from perflib import rundir, safeinput
from perflib.campaign import load_campaign
from perflib.config import MAX_RUNS
from perflib.errors import PerflibError
from perflib.load.answer import USAGE_FIELDS, StreamState
from perflib.load.sse import SSEError, SSESplitter
from perflib.metrics import parse_exposition

FUZZ = settings.get_profile("perflib-fuzz")
LIMIT_S = 10
RUN = DATA / "campaign-sample" / "raw" / "sample" / "after" / "cpu" / "b2_c128_r1"

HOSTILE_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2 ** 70, max_value=2 ** 70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
"""Values a hostile writer puts where a number or an object belongs."""




def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _mutate_lines(text: str, data: st.DataObject) -> str:
    """Lines of `text` cut, duplicated, swapped or replaced by a hostile line."""
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        i = data.draw(st.integers(0, max(0, len(lines) - 1)), label="line")
        how = data.draw(st.sampled_from(["cut", "dup", "replace", "truncate", "insert"]), label="how")
        if how == "cut" and lines:
            del lines[i]
        elif how == "dup" and lines:
            lines.insert(i, lines[i])
        elif how == "truncate" and lines:
            lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])), label="at")]
        else:
            new = data.draw(st.text(max_size=40) | st.sampled_from(
                ["NaN", "+Inf", "-Inf", "{", "}", "#", "# TYPE x counter", 'x{a="1"} 1', 'x{a="1"} 2', "&a [*a]",
                 "*a", "- - -", "\x00", "\u2028"]), label="new")
            lines[i:i + (how == "replace")] = [new]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- /metrics exposition


@settings(FUZZ)
@given(data=st.data())
def test_exposition_parser(data):
    text = _mutate_lines((RUN / rundir.METRICS_AFTER).read_text(), data)
    with time_limit(LIMIT_S):
        try:
            samples = parse_exposition(text, "metrics_after.txt")
        except PerflibError as exc:
            assert "metrics_after.txt" in str(exc) and "\n" not in str(exc)
            return
    series = [(s.name, s.labels) for s in samples]
    assert len(series) == len(set(series)), "a repeated series must be an error, not two samples"
    for s in samples:
        assert isinstance(s.name, str) and s.name and isinstance(s.value, float) and isinstance(s.kind, str)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in s.labels)


# ----------------------------------------------------------------------------- run folder


def _mutated_json(obj: Any, data: st.DataObject) -> Any:
    """`obj` with one value somewhere replaced by a hostile one, or a key dropped."""
    if isinstance(obj, dict) and obj and data.draw(st.booleans(), label="descend"):
        key = data.draw(st.sampled_from(sorted(obj)), label="key")
        out = dict(obj)
        if data.draw(st.integers(0, 5), label="drop") == 0:
            del out[key]
        else:
            out[key] = _mutated_json(obj[key], data)
        return out
    if isinstance(obj, list) and obj and data.draw(st.booleans(), label="descend"):
        i = data.draw(st.integers(0, len(obj) - 1), label="index")
        return [*obj[:i], _mutated_json(obj[i], data), *obj[i + 1:]]
    return data.draw(HOSTILE_JSON, label="value")


def _dumps(obj: Any) -> str:
    return json.dumps(obj)  # NaN/Infinity written as a careless writer would


@settings(FUZZ)
@given(data=st.data())
def test_manifest_and_records_reader(data):
    manifest = json.loads((RUN / rundir.MANIFEST).read_text())
    records = [json.loads(line) for line in (RUN / rundir.REQUESTS).read_text().splitlines()]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / RUN.name
        run.mkdir()
        (run / rundir.MANIFEST).write_text(_dumps(_mutated_json(manifest, data)))
        lines = [_dumps(_mutated_json(r, data)) if data.draw(st.booleans(), label="bad record") else _dumps(r)
                 for r in records]
        (run / rundir.REQUESTS).write_text(_mutate_lines("\n".join(lines) + "\n", data)
                                           if data.draw(st.booleans(), label="cut lines") else "\n".join(lines))
        before = _listing(Path(tmp))
        with time_limit(LIMIT_S):
            try:
                got = rundir.read_manifest(run)
                recs = rundir.read_requests(run / rundir.REQUESTS)
            except PerflibError as exc:
                assert str(run) in str(exc) and "\n" not in str(exc)
                got = None
        assert _listing(Path(tmp)) == before
    if got is None:
        return
    for name, kind in rundir.MANIFEST_FIELDS.items():
        if name in got:
            assert safeinput.value_problem(got[name], kind) is None, (name, got[name])
    for line, rec in enumerate(recs, start=1):
        rundir.check_request(rec, run / rundir.REQUESTS, line)  # its own check passes again
        for name in ("ttft_ms", "e2e_ms", "decode_tok_s"):
            assert rec.get(name) is None or math.isfinite(rec[name])


# ----------------------------------------------------------------------------- campaign loader

CAMPAIGN = """\
name: t
model: {name: tiny, weight_bytes: 1000}
backends:
  - name: cpu
    url: http://127.0.0.1:9
    peak_bandwidth_gbs: 100
    profiler: {kind: kineto, output: '{data_dir}/{arm}.json'}
batches: &b [1, 2]
contexts: [64]
decode_tokens: 8
repeats: 2
arms: [{name: before}, {name: after}]
gate: {measure: decode_tok_s, batch: 1, max_regression_pct: 5}
"""


@settings(FUZZ)
@given(data=st.data())
def test_campaign_loader(data):
    text = _mutate_lines(CAMPAIGN, data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.yaml"
        path.write_text(text)
        before = _listing(Path(tmp))
        with time_limit(LIMIT_S):
            try:
                campaign = load_campaign(path)
            except PerflibError as exc:
                assert str(path) in str(exc)
                campaign = None
        assert _listing(Path(tmp)) == before
    if campaign is None:
        return
    assert campaign.run_count <= MAX_RUNS
    for name in (campaign.name, *(a.name for a in campaign.arms), *(b.name for b in campaign.backends)):
        assert rundir.name_problem(name) is None, name
    for backend in campaign.backends:
        bw = backend.peak_bandwidth_gbs
        assert bw is None or (math.isfinite(bw) and bw > 0)


# ----------------------------------------------------------------------------- SSE


def _plain_split(stream: bytes) -> list[bytes]:
    """The reference: SSE events of the whole stream at once, on `\\n` only."""
    events, data = [], []
    for line in stream.split(b"\n")[:-1]:
        line = line[:-1] if line.endswith(b"\r") else line
        if not line:
            if data:
                events.append(b"\n".join(data))
                data = []
        elif line.startswith(b"data:"):
            data.append(line[6:] if line.startswith(b"data: ") else line[5:])
    return events


PIECES = st.lists(st.sampled_from([b"data: ", b"data:", b"\n", b"\r\n", b"\n\n", b": c\n", b"x" * 40, b"{}",
                                   b"[DONE]", "\u2028".encode(), b"event: e\n"]) | st.binary(max_size=30),
                  max_size=40)


@settings(FUZZ)
@given(pieces=PIECES, limit=st.integers(8, 200))
def test_sse_splitter(pieces, limit):
    splitter = SSESplitter(max_line_bytes=limit)
    out: list[bytes] = []
    stream = b"".join(pieces)
    with time_limit(LIMIT_S):
        try:
            for piece in pieces:
                out += splitter.feed(piece)
        except SSEError as exc:
            assert f"longer than {limit} bytes" in str(exc)
            assert max((len(line) for line in stream.split(b"\n")), default=0) > limit or len(stream) > limit
            return
    assert out == _plain_split(stream)
    assert all(len(p) <= limit for p in out)


@settings(FUZZ)
@given(value=HOSTILE_JSON, where=st.sampled_from(["usage", "timings", "choices", "text", "delta", "error",
                                                  "completion_tokens", "predicted_ms"]))
def test_stream_event_checks(value, where):
    event: dict[str, Any] = {"choices": [{"text": "a", "delta": {"content": "b"}}],
                             "usage": {"completion_tokens": 2}, "timings": {"predicted_n": 2, "predicted_ms": 1.0}}
    if where in ("text", "delta"):
        event["choices"][0][where] = value
    elif where == "completion_tokens":
        event["usage"][where] = value
    elif where == "predicted_ms":
        event["timings"][where] = value
    else:
        event[where] = value
    state = StreamState()
    state.take(json.dumps(event).encode(), 1)  # never raises: a bad value is the record's error
    assert state.error is None or state.error.startswith(("malformed SSE", "server error"))
    if state.error is None:
        for name, kind in USAGE_FIELDS.items():
            assert safeinput.value_problem((state.usage or {}).get(name), kind) is None
        json.dumps({"usage": state.usage, "timings": state.timings}, allow_nan=False)
