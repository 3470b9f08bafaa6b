"""`profiler: {kind: cupti, library: ...}`: which injection library a campaign's traced server gets
(perflib's own by default, the CUDA sample's by name, or a file of one's own); no server is started."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from perflib import campaign as pc
from perflib.campaign import servers


def _campaign(tmp_path: Path, library: str | None) -> pc.Campaign:
    profiler = "{kind: cupti}" if library is None else f"{{kind: cupti, library: {library}}}"
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: t
        model: {{name: m, path: m.gguf}}
        backends:
          - name: gpu
            server: {{preset: llama-server, binary: /opt/llama-server}}
            profiler: {profiler}
        batches: [1]
        contexts: [64]
        decode_tokens: 8
        """))
    return pc.load_campaign(path)


@pytest.mark.parametrize(("library", "sample"), [(None, False), ("perflib", False), ("sample", True)])
def test_perflib_library_by_default_and_the_sample_by_name(tmp_path, monkeypatch, library, sample):
    asked = []

    def ensure(cuda_home=None, sample=False, progress=False):  # the build itself: tests/server/test_cupti_library.py
        asked.append(sample)
        return tmp_path / ("sample.so" if sample else "perflib.so")

    monkeypatch.setattr(servers.server, "ensure_cupti_library", ensure)
    campaign = _campaign(tmp_path, library)
    prepared = servers.prepare(campaign, campaign.arms[0], campaign.backends[0], progress=False)
    assert asked == [sample]
    assert prepared.library == tmp_path / ("sample.so" if sample else "perflib.so")


def test_a_library_of_ones_own_is_a_path_beside_the_campaign(tmp_path, monkeypatch):
    monkeypatch.setattr(servers.server, "ensure_cupti_library", lambda **_: pytest.fail("nothing to build"))
    campaign = _campaign(tmp_path, "libs/libmine.so")
    prepared = servers.prepare(campaign, campaign.arms[0], campaign.backends[0], progress=False)
    assert prepared.library == tmp_path / "libs" / "libmine.so"
