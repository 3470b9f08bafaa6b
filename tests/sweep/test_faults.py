"""Faults of a sweep against a real server or none: unreachable, /metrics off, killed mid-level.

Records already measured are kept, the manifest says incomplete and why, and a rerun measures the
level again without losing the old records (moved aside).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from perflib import load, rundir, runs, safeinput, sweep
from perflib.cli import main as cli_main
from perflib.commands.sweep import format_level_table
from perflib.server import free_port, start_llama_server


def test_unreachable_server_message_and_manifest(tmp_path, capsys):

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code = cli_main(["sweep", "--base-url", url, "--batch", "1", "--context", "16", "--decode-tokens", "4",
                     "--repeats", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"server unreachable at {url}" in err and "--start-server" in err and "b1_c16_r1" in err
    manifest = rundir.read_manifest(tmp_path / "b1_c16_r1")
    assert manifest["status"] == "incomplete" and url in manifest["errors"][0]


def test_no_server_given_is_a_clear_error(tmp_path, capsys):
    code = cli_main(["sweep", "--batch", "1", "--context", "16", "--out", str(tmp_path)])
    assert code == 2
    assert "--base-url" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Real llama-server: /metrics off, and SIGKILL in the middle of a level


@pytest.mark.server
def test_metrics_off_level_runs_but_is_incomplete(llama_server_binary, tiny_model, tmp_path):

    with start_llama_server(tiny_model, parallel=2, ctx_size=2 * 256, threads=1, metrics=False,
                            binary=llama_server_binary, log_path=tmp_path / "server.log") as handle:
        res = sweep.run_level(load.LevelSpec(handle.base_url, 2, 64, 24, 1, out_dir=tmp_path / "out",
                                             server=load.ServerInfo.of(handle)))
    records = safeinput.read_jsonl(res.run_dir / "requests.jsonl")
    assert len(records) == 2 and all(r["ok"] and r["completion_tokens"] == 24 for r in records)
    manifest = rundir.read_manifest(res.run_dir)
    # Decision (documented in perflib.sweep.run_level): the client records are kept, but without
    # counters the level is incomplete, so a rerun against a server with --metrics measures it again.
    assert manifest["status"] == "incomplete"
    assert manifest["metrics"]["available"] is False
    assert any("counters unavailable" in e and "/metrics" in e and "501" in e for e in manifest["errors"])
    assert not (res.run_dir / "metrics_before.txt").exists()
    assert res.summary["decode_step_ms"] is None and res.summary["occupancy"] is None
    assert res.summary["ttft_ms"] is not None  # client side still works: decode tok/s too, or why not (a
    assert (res.summary["decode_tok_s"] is not None) != bool(res.summary["decode_tok_s_reason"])  # coalesced stream)
    table = format_level_table(runs.level_rows([res.summary]))
    assert "n/a (no /metrics)" in table
    assert "--metrics" in manifest["server"]["flags"] or "--metrics" not in handle.flags


@pytest.mark.server
@pytest.mark.slow
def test_server_killed_mid_level_keeps_records_and_rerun_remeasures(llama_server_binary, tiny_model, tmp_path):

    out = tmp_path / "out"
    decode = 160
    # --parallel 2 with batch 4: two requests run, two wait for a slot; kill once two have finished.
    handle = start_llama_server(tiny_model, parallel=2, ctx_size=2 * (64 + decode + 64), threads=1,
                                binary=llama_server_binary, log_path=tmp_path / "server.log")
    requests_file = rundir.run_dir(out, 4, 64, 1) / "requests.jsonl"
    results: list[sweep.LevelResult] = []
    worker = threading.Thread(target=lambda: results.append(
        sweep.run_level(load.LevelSpec(handle.base_url, 4, 64, decode, 1, out_dir=out, server=load.ServerInfo.of(handle)))))
    try:
        worker.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if requests_file.exists() and len(requests_file.read_text().splitlines()) >= 2:
                break
            time.sleep(0.01)
        handle.kill()  # SIGKILL, as a crash would
        worker.join(timeout=120)
    finally:
        handle.kill()
    assert not worker.is_alive() and results
    res = results[0]
    records = safeinput.read_jsonl(requests_file)
    assert len(records) == 4
    finished = [r for r in records if r["ok"]]
    failed = [r for r in records if not r["ok"]]
    assert len(finished) >= 2 and all(r["completion_tokens"] == decode for r in finished)
    assert failed, "the kill came after every request had finished; nothing was in flight"
    assert all(r["error"] and ("connection lost" in r["error"] or "cannot connect" in r["error"]) for r in failed)
    manifest = rundir.read_manifest(res.run_dir)
    assert manifest["status"] == "incomplete" and res.status == "incomplete"
    assert any(f"{len(failed)} of 4 requests failed" in e for e in manifest["errors"])
    assert any("/metrics scrape after" in e for e in manifest["errors"])
    assert (res.run_dir / "server.log").stat().st_size > 0  # the level's slice of the log

    # Rerun against a fresh server: the incomplete folder is moved aside, not deleted, and re-measured.
    with start_llama_server(tiny_model, parallel=2, ctx_size=2 * (64 + decode + 64), threads=1,
                            binary=llama_server_binary, log_path=tmp_path / "server2.log") as fresh:
        again = sweep.run_level(load.LevelSpec(fresh.base_url, 4, 64, 16, 1, out_dir=out, server=load.ServerInfo.of(fresh)))
    assert again.status == "complete", again.errors
    assert again.moved_aside == out / "b4_c64_r1.incomplete-1"
    kept = safeinput.read_jsonl(Path(again.moved_aside) / "requests.jsonl")
    assert [r["request_id"] for r in kept] == [r["request_id"] for r in records]
    assert len(safeinput.read_jsonl(again.run_dir / "requests.jsonl")) == 4
    # and a complete run is never re-measured
    skipped = sweep.run_level(load.LevelSpec("http://127.0.0.1:9", 4, 64, 16, 1, out_dir=out))
    assert skipped.skipped and skipped.status == "complete"
