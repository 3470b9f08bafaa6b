"""A group's files moved between two data folders as a cluster runner moves them: listed (path, size,
SHA-256), fetched in bounded chunks, checked after the copy, installed whole or not used."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from perflib import rundir
from perflib.campaign import transfer
from perflib.errors import PerflibError

GROUP = transfer.group_path("fleet", "default", "cpu")


def run_folder(root: Path, name: str, status: str = "complete", trace: bytes = b"") -> Path:
    folder = root / GROUP / name
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"status": status, "errors": []}))
    (folder / "requests.jsonl").write_text('{"ok": true}\n' * 3)
    if trace:
        (folder / "trace.parquet").write_bytes(trace)
    return folder


def worker_folder(root: Path) -> None:
    run_folder(root, "b1_c32_r1", trace=os.urandom(3 * 1000 + 17))
    run_folder(root, "b2_c32_r1")
    (root / GROUP / "server.json").write_text('{"starts": []}')
    (root / GROUP / "capture" / "1").mkdir(parents=True)
    (root / GROUP / "capture" / "1" / "cupti.txt").write_text("huge lifetime capture")
    (root / GROUP / ".claim.json").write_text("{}")


def reader(root: Path, seen: list[int] | None = None, corrupt: str = ""):
    def read(path: str, offset: int, size: int) -> bytes:
        block = transfer.read_chunk(str(root), path, offset, size)
        if seen is not None:
            seen.append(len(block))
        return block[:-1] + b"X" if corrupt and path.endswith(corrupt) and block else block
    return read


def test_a_listing_names_every_file_but_the_captures_and_dot_files(tmp_path):
    worker_folder(tmp_path)
    listed = transfer.listing(tmp_path, GROUP)
    paths = [e.path for e in listed]
    assert paths == sorted(paths) and f"{GROUP}/server.json" in paths
    assert not any("/capture/" in p or "/." in p for p in paths)
    trace = next(e for e in listed if e.path.endswith("trace.parquet"))
    data = (tmp_path / trace.path).read_bytes()
    assert trace.size == len(data) and trace.sha256 == hashlib.sha256(data).hexdigest()
    assert transfer.entries([e.as_list() for e in listed]) == listed


def test_files_arrive_in_bounded_chunks_and_match_the_listing(tmp_path, monkeypatch):
    monkeypatch.setattr(transfer, "CHUNK", 1000)
    worker, here = tmp_path / "worker", tmp_path / "runner"
    worker_folder(worker)
    seen: list[int] = []
    pulled = transfer.pull(transfer.listing(worker, GROUP), here, GROUP, reader(worker, seen))
    assert pulled.rejected == () and sorted(pulled.installed) == ["b1_c32_r1", "b2_c32_r1", "server.json"]
    assert max(seen) <= 1000 and len(seen) >= 4  # the 3 kB trace came in four pieces
    assert transfer.listing(here, GROUP) == transfer.listing(worker, GROUP)
    assert not (here / GROUP / "capture").exists()
    assert not list((here / GROUP).glob(".pull*"))  # the staging folder is gone
    again = transfer.pull(transfer.listing(worker, GROUP), here, GROUP, reader(worker))
    assert again.copied == 0 and again.unchanged == len(transfer.listing(worker, GROUP))


def test_a_folder_that_does_not_match_its_listing_is_not_used(tmp_path):
    worker, here = tmp_path / "worker", tmp_path / "runner"
    worker_folder(worker)
    run_folder(here, "b1_c32_r1", status="incomplete")  # what this runner had: kept, not half replaced
    pulled = transfer.pull(transfer.listing(worker, GROUP), here, GROUP, reader(worker, corrupt="trace.parquet"))
    assert [unit for unit, _ in pulled.rejected] == ["b1_c32_r1"]
    assert "trace.parquet: SHA-256" in pulled.rejected[0][1] and "the listing says" in pulled.rejected[0][1]
    assert sorted(pulled.installed) == ["b2_c32_r1", "server.json"]
    assert not rundir.is_complete(here / GROUP / "b1_c32_r1") and not (here / GROUP / "b1_c32_r1" / "trace.parquet").exists()


def test_a_short_copy_is_not_used_and_an_incomplete_run_here_is_moved_aside_for_a_whole_one(tmp_path):
    worker, here = tmp_path / "worker", tmp_path / "runner"
    worker_folder(worker)
    listed = transfer.listing(worker, GROUP)
    short = transfer.pull(listed, here, GROUP, lambda path, offset, size: b"")  # a worker that left mid-copy
    assert {unit for unit, _ in short.rejected} == {"b1_c32_r1", "b2_c32_r1", "server.json"}
    assert "bytes arrived, the listing says" in short.rejected[0][1]
    run_folder(here, "b2_c32_r1", status="incomplete")
    pulled = transfer.pull(listed, here, GROUP, reader(worker))
    assert "b2_c32_r1" in pulled.installed and rundir.is_complete(here / GROUP / "b2_c32_r1")
    assert rundir.read_manifest(here / GROUP / "b2_c32_r1.incomplete-1")["status"] == "incomplete"


def test_a_complete_run_here_is_kept_and_shared_storage_copies_nothing(tmp_path):
    worker, here = tmp_path / "worker", tmp_path / "runner"
    worker_folder(worker)
    run_folder(here, "b2_c32_r1")
    (here / GROUP / "b2_c32_r1" / "requests.jsonl").write_text('{"ok": false}\n')  # measured here, differently
    pulled = transfer.pull(transfer.listing(worker, GROUP), here, GROUP, reader(worker))
    assert pulled.kept == ("b2_c32_r1",) and (here / GROUP / "b2_c32_r1" / "requests.jsonl").read_text() == '{"ok": false}\n'
    shared = transfer.pull(transfer.listing(worker, GROUP), worker, GROUP, reader(worker))
    assert shared.copied == 0 and shared.installed == () and shared.rejected == ()


@pytest.mark.parametrize("path", ["/etc/passwd", "../secret", f"{GROUP}/../../x", "a\\b", ""])
def test_a_path_that_climbs_out_of_the_data_folder_is_refused(tmp_path, path):
    with pytest.raises(PerflibError, match="must stay below the data folder"):
        transfer.read_chunk(str(tmp_path), path, 0, 10)
    with pytest.raises(PerflibError):
        transfer.entries([[path, 1, "0" * 64]])
