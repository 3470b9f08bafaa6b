"""The page's figures: made without pyplot, legends off the data, a unit on every axis, whiskers from
the runs table, alt text, and no figure at all where there is nothing to draw."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer
from support import DATA, REPO, write_page

from perflib.explore import CampaignView, open_campaign
from perflib.report import figures
from perflib.report.text import escape_md

SAMPLE = DATA / "campaign-sample" / "campaign.yaml"
CAMPAIGNS = {"sample": SAMPLE, **{n: REPO / "campaigns" / f"{n}.yaml" for n in ("cuda-h200", "h200-pytorch",
                                                                                  "cpu-reference")}}


@pytest.fixture(scope="module")
def views() -> dict[str, CampaignView]:
    return {name: open_campaign(path) for name, path in CAMPAIGNS.items()}


def plots(view: CampaignView) -> dict[str, figures.Plot | None]:
    """Every `plot_*` of the notebook's front object, by name."""
    return {name: getattr(view, name)() for name in sorted(dir(view)) if name.startswith("plot_")}


def test_every_plot_method_is_covered(views):
    assert set(plots(views["sample"])) == {"plot_batch_scaling", "plot_decomposition", "plot_step_over_floor",
                                           "plot_before_after", "plot_profile"}


# ----------------------------------------------------------------------------- no pyplot state

PYPLOT_STATE = r"""
import json, sys
import matplotlib
import matplotlib.figure
import perflib

def every_plot(view):
    return [getattr(view, n)() for n in sorted(dir(view)) if n.startswith("plot_")]

views = [perflib.open_campaign(p) for p in sys.argv[1:]]
rc = dict(matplotlib.rcParams)
out = {"backend_before": matplotlib.get_backend()}
made = [p for v in views for p in every_plot(v)]
out["all_figures"] = all(isinstance(p, matplotlib.figure.Figure) for p in made if p)
out["canvases"] = sorted({type(p.canvas).__name__ for p in made if p})
out["drawn"] = sum(p is not None for p in made)
out["pyplot_imported"] = "matplotlib.pyplot" in sys.modules
out["backend_after"] = matplotlib.get_backend()
out["rc_same"] = dict(matplotlib.rcParams) == rc

import matplotlib.pyplot as plt  # a user's own figure, made before and after perflib's plots
mine = plt.figure()
plt.plot([1, 2, 3])
state = (plt.get_fignums(), id(plt.gcf()), len(plt.gca().lines))
made = [p for v in views for p in every_plot(v)]
out["pyplot_same"] = state == (plt.get_fignums(), id(plt.gcf()), len(plt.gca().lines)) and plt.gcf() is mine
out["backend_with_pyplot"] = matplotlib.get_backend()
out["rc_same_with_pyplot"] = dict(matplotlib.rcParams) == rc
print(json.dumps(out))
"""


def test_plots_leave_the_backend_and_pyplot_alone(tmp_path):
    """In a fresh interpreter whose backend is svg: every `c.plot_*()` leaves the backend, rcParams and
    pyplot's figures as they were, and never imports pyplot itself (the old `matplotlib.use("Agg")` and
    `plt.subplots` switched a notebook's inline backend off)."""
    env = {**os.environ, "MPLBACKEND": "svg", "MPLCONFIGDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", PYPLOT_STATE, str(SAMPLE), str(CAMPAIGNS["cuda-h200"])],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["drawn"] >= 8  # 3 of the sample's, 5 of cuda-h200's
    assert out["all_figures"] and out["canvases"] == ["FigureCanvasAgg"]
    assert out["backend_before"] == out["backend_after"] == out["backend_with_pyplot"] == "svg"
    assert not out["pyplot_imported"]
    assert out["rc_same"] and out["rc_same_with_pyplot"]
    assert out["pyplot_same"]


def test_repr_png_is_the_saved_png(views, tmp_path):
    """What a notebook shows is what the page holds: `_repr_png_` gives `save_figure`'s bytes, a PNG of the
    figure's size."""
    plot = views["sample"].plot_batch_scaling()
    png = plot._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == tuple(round(v * figures.DPI) for v in plot.get_size_inches())
    assert figures.save_figure(plot, tmp_path / "a.png").read_bytes() == png
    assert b"Software" not in png and b"matplotlib" not in png.lower()


# ------------------------------------------------------------------------ what is drawn, and what is not

DRAWN = {
    "sample": {"plot_batch_scaling", "plot_decomposition", "plot_before_after"},
    "cuda-h200": {"plot_batch_scaling", "plot_decomposition", "plot_step_over_floor", "plot_before_after",
                  "plot_profile"},
    "h200-pytorch": {"plot_profile"},  # trace-only: no counters, no request records, one arm
    "cpu-reference": {"plot_batch_scaling", "plot_decomposition"},  # no bandwidth, one arm, no trace
}


@pytest.mark.parametrize("name", sorted(DRAWN))
def test_a_figure_with_nothing_to_draw_is_none(views, name):
    drawn = plots(views[name])
    assert {k for k, p in drawn.items() if p is not None} == DRAWN[name]
    for plot in drawn.values():
        assert plot is None or isinstance(plot, figures.Plot)


def _all_drawn(views) -> list[tuple[str, str, figures.Plot]]:
    return [(name, key, p) for name in sorted(DRAWN) for key, p in plots(views[name]).items() if p is not None]


def _data_boxes(ax, renderer) -> tuple[np.ndarray, list]:
    """Display coordinates of an axes' data: the points of its lines and collections, the boxes of its bars."""
    points = [line.get_transform().transform(line.get_xydata()) for line in ax.lines]
    for coll in ax.collections:
        points += [coll.get_transform().transform(path.vertices) for path in coll.get_paths()]
    points = np.concatenate(points) if points else np.empty((0, 2))
    boxes = [p.get_window_extent(renderer) for p in ax.patches]
    return points[np.isfinite(points).all(axis=1)], [b for b in boxes if np.isfinite(b.get_points()).all()]


def test_no_legend_covers_data(views):
    """Drawn, each legend's box lies outside every axes and holds no data point and no bar."""
    checked = 0
    for name, key, plot in _all_drawn(views):
        plot.canvas.draw()
        renderer = plot.canvas.get_renderer()
        legends = [*plot.legends, *(ax.get_legend() for ax in plot.axes if ax.get_legend() is not None)]
        assert legends, (name, key)
        for legend in legends:
            box = legend.get_window_extent(renderer)
            for ax in plot.axes:
                assert not box.overlaps(ax.get_window_extent(renderer)), (name, key, "legend over the axes")
                points, bars = _data_boxes(ax, renderer)
                assert len(points) or bars
                inside = [p for p in points if box.contains(*p)]
                assert not inside, (name, key, inside[:3])
                assert not [b for b in bars if b.width and b.height and box.overlaps(b)], (name, key)
                checked += 1
    assert checked >= 9


UNIT = re.compile(r"\((ms|%|×|tokens|requests|concurrent requests)\)")


def test_every_axis_names_its_unit(views):
    for name, key, plot in _all_drawn(views):
        for ax in plot.axes:
            for label in (ax.get_xlabel(), ax.get_ylabel()):
                assert UNIT.search(label), (name, key, label)


def _bars(ax) -> dict[str, tuple[list[float], list[tuple[float, float]]]]:
    """Per arm (a bar container's label): the bar heights and each whisker's (low, high)."""
    out = {}
    for container in (c for c in ax.containers if isinstance(c, BarContainer)):
        heights = [bar.get_height() for bar in container]
        whiskers = [(float(seg[0][1]), float(seg[1][1])) for seg in container.errorbar.lines[2][0].get_segments()]
        out[container.get_label()] = (heights, whiskers)
    return out


@pytest.mark.parametrize("name", ["sample", "cuda-h200"])
def test_before_after_whiskers_are_min_and_max_over_repeats(views, name):
    """Bars are the page's medians; whiskers the fastest and slowest complete repeat, from the runs table."""
    view = views[name]
    arms = [a.name for a in view.campaign.compared_arms]
    runs = view.runs[view.runs["status"] == "complete"]
    plot = view.plot_before_after()
    spans = 0
    for ax, (column, _) in zip(plot.axes, figures.BEFORE_AFTER_PANELS, strict=True):
        bars = _bars(ax)
        assert list(bars) == arms
        keys = view.levels[["backend", "batch", "context"]].drop_duplicates().sort_values(["backend", "batch", "context"])
        for arm in arms:
            heights, whiskers = bars[arm]
            for k, height, (low, high) in zip(keys.itertuples(index=False), heights, whiskers, strict=True):
                at = runs[(runs["arm"] == arm) & (runs["backend"] == k.backend) & (runs["batch"] == k.batch)
                          & (runs["context"] == k.context)]
                values = pd.to_numeric(at[column], errors="coerce").dropna()
                assert height == pytest.approx(values.median())
                assert (low, high) == (pytest.approx(values.min()), pytest.approx(values.max()))
                spans += high > low
    assert spans >= 4  # the repeats do differ, so the whiskers show something


def test_alt_text_says_what_each_figure_shows(views):
    for name, key, plot in _all_drawn(views):
        assert len(plot.alt) > 80 and plot.alt.endswith("."), (name, key, plot.alt)
        assert re.search(r"\(ms|\(%\)|\(×", plot.alt), (name, key, plot.alt)
    levels = views["cuda-h200"].levels
    alt = views["cuda-h200"].plot_batch_scaling().alt
    at = levels[(levels["arm"] == "after-kvu") & (levels["context"] == 1024)].sort_values("batch")
    first, last = at.iloc[0], at.iloc[-1]
    assert (f"after-kvu ctx 1024: {first.decode_step_ms:.1f} ms at batch 1 to {last.decode_step_ms:.1f} ms "
            f"at batch 8") in alt
    assert "one bar per arm (before, after, after-kvu)" in views["cuda-h200"].plot_before_after().alt


# ------------------------------------------------------------------------------ the page


def test_page_uses_alt_text_and_leaves_out_what_is_not_drawn(views, tmp_path):
    """The page's images carry each figure's alt text; a figure that is None has no image line and no PNG,
    not even a stale one from an earlier build."""
    shutil.copytree(SAMPLE.parent, tmp_path / "sample")
    campaign = open_campaign(tmp_path / "sample" / "campaign.yaml").campaign
    stale = tmp_path / "reports" / "sample-2026-01-01" / "step_over_floor.png"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    page = write_page(campaign, reports_dir=tmp_path / "reports", date="2026-01-01")
    text = page.read_text()
    images = re.findall(r"!\[([^\]]*(?:\\\][^\]]*)*)\]\(([^)]+)\)", text)
    assert sorted(path for _, path in images) == [f"sample-2026-01-01/{n}.png" for n in
                                                  ("batch_scaling", "before_after", "decomposition")]
    view = views["sample"]
    expected = {"batch_scaling": view.plot_batch_scaling(), "before_after": view.plot_before_after(),
                "decomposition": view.plot_decomposition()}
    for alt, path in images:
        assert alt == escape_md(expected[path.split("/")[1][:-4]].alt)
        assert (page.parent / path).is_file()
    assert not stale.exists()
    assert sorted(p.name for p in stale.parent.iterdir()) == ["batch_scaling.png", "before_after.png",
                                                              "decomposition.png"]
    assert "step_over_floor" not in text and "Not measured: the campaign gives no" in text


def test_a_page_with_no_figure_at_all_is_still_written(tmp_path):
    """No run on disk: every figure is None, and the page (with no image) still lands in a new reports folder."""
    (tmp_path / "c").mkdir()
    shutil.copy(SAMPLE, tmp_path / "c" / "campaign.yaml")
    campaign = open_campaign(tmp_path / "c" / "campaign.yaml").campaign
    page = write_page(campaign, reports_dir=tmp_path / "new" / "reports")
    assert page.is_file() and "![" not in page.read_text()
    assert not page.with_suffix("").exists()
