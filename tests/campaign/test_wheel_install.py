"""A wheel install runs a campaign: what an editable checkout hides.

The checkout's files an sdist carries are built into a wheel (`pip wheel --no-deps`), the wheel is installed
with its dependencies into a fresh venv, and that venv's `perflib campaign run` measures a one-run campaign
against the cached CPU llama-server from a folder outside the clone, with no PYTHONPATH: a file the package
needs but does not ship (the notebooks, copied in by setup.py at build time; a class table; a template) fails
here. CI runs it with the rest of `make test`; about 1-2 minutes on the 2-core machine, most of it pip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import venv
import zipfile
from pathlib import Path

import pytest
from support import REPO

pytestmark = [pytest.mark.server, pytest.mark.slow]

SDIST = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "perflib", "notebooks")
"""What a wheel is built from (the sdist's files): nothing else of the clone reaches the venv."""

CAMPAIGN = """\
name: wheel
model: {name: tiny random llama, random: {n_layer: 2}}
backends:
  - name: cpu
    start: llama-server-local
    dialect: llamacpp
    threads: 1
batches: [1]
contexts: [64]
decode_tokens: 8
repeats: 1
data_dir: data
reports_dir: reports
"""


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_a_wheel_in_a_fresh_venv_runs_a_campaign_from_outside_the_clone(tmp_path, llama_server_binary, tiny_model):
    timings = {}
    source = tmp_path / "source"
    for name in SDIST:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    # the venv and the runs see no PYTHONPATH (the checkout) and run in a folder outside the clone
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}

    start = time.monotonic()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
         tmp_path, env, 600)
    (wheel,) = (tmp_path / "dist").glob("perflib-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        shipped = set(whl.namelist())
    for notebook in sorted((REPO / "notebooks").glob("*.ipynb")):
        assert f"perflib/notebooks/{notebook.name}" in shipped, f"{wheel.name} lacks notebooks/{notebook.name}"
    timings["wheel"] = time.monotonic() - start

    start = time.monotonic()
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python, perflib = env_dir / "bin" / "python", env_dir / "bin" / "perflib"
    _run([str(python), "-m", "pip", "install", "-q", f"{wheel}[notebooks]"], tmp_path, env, 900)
    timings["install"] = time.monotonic() - start

    where = json.loads(_run([str(python), "-c", "import json, perflib, perflib.campaign as c; "
                                                "print(json.dumps([perflib.__file__, str(c.NOTEBOOKS)]))"],
                            tmp_path, env, 120).stdout)
    site = str(env_dir.resolve())
    assert where[0].startswith(site) and where[1].startswith(site), f"not the installed wheel: {where}"

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "campaign.yaml").write_text(textwrap.dedent(CAMPAIGN))
    start = time.monotonic()
    done = _run([str(perflib), "campaign", "run", "campaign.yaml", "--no-contention"], outside, env, 600)
    timings["campaign"] = time.monotonic() - start

    run_dir = outside / "data" / "raw" / "wheel" / "default" / "cpu" / "b1_c64_r1"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete", manifest.get("errors")
    assert (run_dir / "requests.jsonl").stat().st_size > 0 and (run_dir / "collect.ipynb").is_file()
    pages = sorted((outside / "reports").glob("wheel*.md"))
    assert pages, f"no page in {outside / 'reports'}; the run printed:\n{done.stdout[-2000:]}"
    page = pages[-1].read_text()
    assert "| default | cpu | 1 | 64 |" in page  # the measured level's row
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page)
    assert figures and all((pages[-1].parent / f).is_file() for f in figures), figures
    print("wheel install test, seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
