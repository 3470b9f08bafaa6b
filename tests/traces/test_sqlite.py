"""Read-only means read-only: SQLite traces (rocpd, nsys) are read under any file name, in WAL mode,
and from a read-only folder, and the folder holds exactly what it held before."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, fixture

from perflib.errors import InputError
from perflib.traces import read_trace, schema, writers

ODD_NAMES = ["run#1_results.db", "a?b_results.db", "50%_done_results.db", "with space_results.db", "ünï_results.db"]


def table(n: int = 30):
    start = [1_000_000 + 10_000 * i for i in range(n)]
    return schema.dispatch_frame({"kernel": ["gemv", "rmsnorm", "rope"] * (n // 3), "start_ns": start,
                                  "end_ns": [s + 5_000 for s in start], "device": 2, "queue": 1,
                                  "correlation_id": list(range(1, n + 1))}, "rocpd", "made here")


def listing(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir()}


def to_wal(path: Path) -> None:
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    con.close()


def with_pending_wal(path: Path) -> int:
    """Turn `path` into a WAL database whose last rows are still in its `-wal` file (as a profiler killed
    before its checkpoint leaves it); returns how many kernel rows the database then holds."""
    to_wal(path)
    work = path.with_name("work.db")
    shutil.copy(path, work)
    writer = sqlite3.connect(work)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    (suffix,) = writer.execute("SELECT substr(name, length('rocpd_kernel_dispatch_') + 1) FROM sqlite_master "
                               "WHERE name LIKE 'rocpd_kernel_dispatch_%' AND type = 'table'").fetchone()
    writer.execute(f"INSERT INTO rocpd_kernel_dispatch_{suffix} SELECT NULL, guid, nid, pid, tid, agent_id, kernel_id, "
                   f"dispatch_id, queue_id, stream_id, start + 1, \"end\" + 1, event_id FROM rocpd_kernel_dispatch_{suffix}")
    writer.commit()
    shutil.copy(work, path)
    shutil.copy(Path(f"{work}-wal"), Path(f"{path}-wal"))
    (rows,) = writer.execute("SELECT count(*) FROM kernels").fetchone()
    writer.close()
    work.unlink()
    assert Path(f"{path}-wal").stat().st_size > 0 and not Path(f"{path}-shm").exists()
    return rows


@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_file_names_are_read_and_nothing_is_created(tmp_path: Path, name: str) -> None:
    """`#` and `?` in a name once cut the URI short: SQLite opened (and created) `run` or `a`
    read-write, and the real database was reported as having no tables."""
    path = writers.write_rocpd(table(), tmp_path / name)
    before = listing(tmp_path)
    trace = read_trace(path)
    assert len(trace.dispatches) == 30 and trace.meta["sqlite_open"] == "mode=ro"
    assert trace.dispatches["start_ns"].tolist() == table()["start_ns"].tolist()
    assert listing(tmp_path) == before


def test_odd_name_on_a_real_nsys_export(tmp_path: Path) -> None:
    real = fixture("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite")
    path = tmp_path / "rank#0?.sqlite"
    shutil.copy(real, path)
    before = listing(tmp_path)
    assert len(read_trace(path).dispatches) == len(read_trace(real).dispatches) == 20
    assert listing(tmp_path) == before


def test_wal_database_leaves_no_wal_or_shm_behind(tmp_path: Path) -> None:
    path = writers.write_rocpd(table(), tmp_path / "x_results.db")
    to_wal(path)
    before = listing(tmp_path)
    assert set(before) == {"x_results.db"}  # a clean close checkpoints and removes the -wal
    assert len(read_trace(path).dispatches) == 30
    assert listing(tmp_path) == before


def test_wal_database_with_pending_changes_reads_them_and_keeps_its_wal(tmp_path: Path) -> None:
    path = writers.write_rocpd(table(), tmp_path / "x_results.db")
    rows = with_pending_wal(path)
    before = listing(tmp_path)
    trace = read_trace(path)
    assert len(trace.dispatches) == rows == 60  # the rows still in the -wal are read
    assert listing(tmp_path) == before  # the -wal is untouched, and no -shm is left


READER = """
import json, sys
from perflib.errors import InputError
from perflib.traces import read_trace
try:
    t = read_trace(sys.argv[1])
    print(json.dumps({"dispatches": len(t.dispatches), "open": t.meta["sqlite_open"]}))
except InputError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def read_in_read_only_folder(folder: Path, path: Path) -> dict:
    """Read `path` in a child for which `folder` is read-only: a read-only bind mount in a private mount
    namespace when we are root (root writes through mode bits), else the folder's mode bits."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            done = subprocess.run([sys.executable, "-c", READER, str(path)], capture_output=True, text=True,
                                  cwd=REPO, timeout=60)
        finally:
            folder.chmod(0o755)
    else:
        if shutil.which("unshare") is None:
            pytest.skip("root, and no `unshare` for a read-only bind mount: a read-only folder cannot be made")
        script = 'mount --bind -o ro "$1" "$1" && touch "$1/probe" 2>/dev/null && exit 3; exec "$2" -c "$3" "$4"'
        done = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(folder), sys.executable, READER,
                               str(path)], capture_output=True, text=True, cwd=REPO, timeout=60)
        if done.returncode == 3:
            pytest.fail("the read-only bind mount let root create a file")
        if done.returncode and "mount" in done.stderr:
            pytest.skip(f"no read-only bind mount here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_wal_database_in_a_read_only_folder_is_read_immutable_and_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = writers.write_rocpd(table(), folder / "x_results.db")
    to_wal(path)
    before = listing(folder)
    out = read_in_read_only_folder(folder, path)
    assert out.get("dispatches") == 30, out
    assert out["open"].startswith("immutable=1") and "read-only folder" in out["open"]
    assert listing(folder) == before
    # in a writable folder the same file is read the plain read-only way
    assert read_trace(path).meta["sqlite_open"] == "mode=ro" and listing(folder) == before


def test_pending_wal_in_a_read_only_folder_is_refused_not_half_read(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = writers.write_rocpd(table(), folder / "x_results.db")
    with_pending_wal(path)
    out = read_in_read_only_folder(folder, path)
    assert "error" in out, out
    assert "x_results.db-wal" in out["error"] and "bytes of changes" in out["error"]


def test_a_damaged_database_is_an_input_error(tmp_path: Path) -> None:
    path = writers.write_rocpd(table(300), tmp_path / "x_results.db")
    raw = bytearray(path.read_bytes())
    raw[4096:] = bytes(len(raw) - 4096)  # every page after the first zeroed
    path.write_bytes(bytes(raw))
    with pytest.raises(InputError, match="x_results.db"):
        read_trace(path)
