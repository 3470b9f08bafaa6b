"""docs/CATALOGUE.md: written from perflib's registries by scripts/catalogue.py, and kept current.

The committed page must be what the script writes now (stale: run `make docs`); every registry entry is
on it; a field added to a registry's entries (a flag on a measurement, a registry of dialects or profiler
kinds where today there are tuples of names) shows up without a change to the script.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
from support import REPO

from perflib.classes import builtin_backends
from perflib.config import loader
from perflib.config import model as config_model
from perflib.server import PRESETS
from perflib.traces import FORMATS
from perflib.verdicts import MEASUREMENTS

PAGE = REPO / "docs" / "CATALOGUE.md"


@pytest.fixture(scope="module")
def catalogue():
    spec = importlib.util.spec_from_file_location("catalogue", REPO / "scripts" / "catalogue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def source(catalogue) -> str:
    return catalogue.SOURCE.read_text(encoding="utf-8")


def test_the_committed_page_is_what_the_script_writes(catalogue, source):
    """Stale when a registry, the prose or the script changed without `make docs`."""
    assert catalogue.render(source) == PAGE.read_text(encoding="utf-8"), \
        "docs/CATALOGUE.md is stale: run `make docs` (python scripts/catalogue.py)"
    assert catalogue.main(["--check"]) == 0


def test_every_registry_entry_is_on_the_page():
    page = PAGE.read_text(encoding="utf-8")
    names = [*FORMATS, *MEASUREMENTS, *PRESETS, *builtin_backends(),
             *(c.id for p in loader.PLAYBOOKS.glob("*.yaml") for c, _ in loader.read_playbook(p.stem))]
    missing = [n for n in names if f"| `{n}` |" not in page]
    assert not missing, missing
    for m in MEASUREMENTS.values():
        assert f"| {m.doc} |" in page, m.name  # its meaning: the docstring's first line


def test_a_new_flag_on_a_measurement_is_a_column(catalogue, monkeypatch):
    """A boolean field added to `Measurement` (say `reads_the_api_table`, which none has) becomes a column, set where true."""
    base = type(next(iter(MEASUREMENTS.values())))
    flagged = dataclasses.make_dataclass("Flagged", [("reads_the_api_table", bool, dataclasses.field(default=False))],
                                         bases=(base,), frozen=True)
    entries = {n: flagged(**{f.name: getattr(m, f.name) for f in dataclasses.fields(m)},
                          reads_the_api_table=n == "step_ratio") for n, m in MEASUREMENTS.items()}
    monkeypatch.setattr(catalogue, "MEASUREMENTS", entries)
    text = catalogue.section_measurements()
    header = text.splitlines()[0]
    assert "| reads_the_api_table |" in header
    column = header.strip("|").split("|").index(" reads_the_api_table ")
    marked = [ln.strip("|").split("|")[0].strip() for ln in text.splitlines()[2:]
              if ln.startswith("| `") and ln.strip("|").split("|")[column].strip() == "yes"]
    assert marked == ["`step_ratio`"]


def test_registries_of_entries_are_shown_field_by_field(catalogue, monkeypatch):
    """Where `perflib.metrics.DIALECTS` or `perflib.server.PROFILER_KINDS` is a mapping of dataclasses, the
    section is a table of their fields, not the fallback written from today's tuples of names."""
    @dataclasses.dataclass(frozen=True)
    class Entry:
        name: str
        what: str
        reads_histograms: bool = False

    registry = {"one": Entry("one", "the first"), "two": Entry("two", "the second", True)}
    monkeypatch.setattr(catalogue.metrics, "DIALECTS", registry)
    monkeypatch.setattr(catalogue.server, "PROFILER_KINDS", registry, raising=False)
    for section in (catalogue.section_dialects, catalogue.section_profilers):
        lines = section().splitlines()
        assert lines[0] == "| name | what | reads_histograms |"
        assert lines[2:] == ["| `one` | the first | |", "| `two` | the second | yes |"]


def test_every_dialect_and_profiler_kind_is_listed(catalogue):
    """Every dialect of `perflib.metrics.DIALECTS` and every profiler kind a campaign may name is on the page
    (from the registries where they exist, else from today's tuples of names)."""
    kinds = getattr(catalogue.server, "PROFILER_KINDS", None) or config_model.PROFILER_KINDS
    page = PAGE.read_text(encoding="utf-8")
    assert all(f"| `{d}` |" in page for d in catalogue.metrics.DIALECTS)
    assert all(f"| `{k}` |" in page for k in kinds)


def test_every_section_is_placed_once_and_no_marker_is_unknown(catalogue, source):
    assert sorted(catalogue.MARKER.findall(source)) == sorted(catalogue.SECTIONS)
    with pytest.raises(ValueError, match=r"unknown section markers \['nosuch'\]"):
        catalogue.render(source + "\n<!-- section: nosuch -->\n")
    with pytest.raises(ValueError, match="sections never placed"):
        catalogue.render(source.replace(catalogue.MARKER.search(source).group(0), "", 1))
