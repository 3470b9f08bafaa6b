"""The page's figures, each a `matplotlib.figure.Figure` on an Agg canvas of its own, saved as PNGs that
depend on the data only.

No figure goes through pyplot: pyplot's backend and figure list belong to whoever runs perflib (a
JupyterLab kernel's inline backend, a script's), and a library that switched them would leave that
kernel showing nothing. A `Plot` shows itself as an `image/png` output when it is a cell's value.

Each `plot_*` returns a `Plot` whose `alt` says what it shows (the page's `![alt](path)`), or None when
there is nothing to draw (no counters, no bandwidth for a floor, one arm, no trace): the page then
leaves the image out instead of showing an empty frame. Legends sit outside the axes, so they cover
no data, and every axis names its unit.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from perflib import atomic, checks
from perflib.config import Campaign
from perflib.derive import DerivedTables
from perflib.report.tables import LEVEL_KEYS, decode_level_table, floor_table, level_table, work_words

DPI = 100
LEVEL_AXIS = "level: b = batch (requests), c = context (tokens)"
"""The x label of per-level bars, whose tick labels read `b4 c1024`."""


class Plot(Figure):
    """A Figure with its alt text, drawn on its own Agg canvas (constrained layout, no pyplot).

    `_repr_png_` is what IPython asks a bare object for, so a Plot returned as a cell's value is an
    `image/png` output in JupyterLab, nbconvert and papermill whatever the kernel's backend is; the
    bytes are those `save_figure` writes."""

    def __init__(self, width: float, height: float, alt: str = ""):
        super().__init__(figsize=(width, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(self)
        self.alt = alt

    def _repr_png_(self) -> bytes:
        return png_bytes(self)


def _finite(values: Any) -> list[float]:
    """The finite numbers among `values` (None, NaN and non-numbers dropped)."""
    out = []
    for v in values:
        try:
            number = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out.append(number)
    return out


def _num(value: Any) -> float:
    """`value` as a float, NaN where it is None or not a number (a gap in a plot, never 0)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _arm_colours(tables: DerivedTables) -> dict[str, str]:
    """One colour of matplotlib's default cycle per arm, in the sorted order of the page's tables, so
    an arm keeps its colour across the figures of a page."""
    arms = sorted({str(a) for frame in (tables.runs, tables.trace_runs) if frame is not None and len(frame)
                   for a in frame["arm"]})
    return {arm: f"C{i % 10}" for i, arm in enumerate(arms)}


def _legend_below(fig: Figure, ax: Any, ncols: int) -> None:
    """The figure's legend under the axes (outside them, so it covers no data)."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=max(1, ncols), fontsize=8, frameon=False)


def _series_label(arm: str, backend: str, context: Any, arms: int, backends: int) -> str:
    parts = []
    if arms > 1:
        parts.append(str(arm))
    if backends > 1:
        parts.append(str(backend))
    parts.append(f"ctx {context}")
    return " ".join(parts)


def plot_batch_scaling(tables: DerivedTables) -> Plot | None:
    """Decode step ms against batch size, one line per (arm, backend, context): the colour is the arm (the
    context where there is one arm), the line style the context, the marker the backend. None where no level has a decode step from the counters."""
    levels = level_table(tables)
    if not len(levels) or not _finite(levels["decode_step_ms"]):
        return None
    n_arms, n_backends = levels["arm"].nunique(), levels["backend"].nunique()
    contexts = sorted(levels["context"].unique())
    backends = sorted(str(b) for b in levels["backend"].unique())
    colours = _arm_colours(tables)
    fig = Plot(7.2, 3.8)
    ax = fig.subplots()
    said = []
    for (arm, backend, context), at in levels.groupby(["arm", "backend", "context"], sort=True):
        at = at.sort_values("batch")
        steps = [_num(v) for v in at["decode_step_ms"]]
        if not _finite(steps):
            continue
        label = _series_label(arm, backend, context, n_arms, n_backends)
        style = ("-", "--", ":", "-.")[contexts.index(context) % 4]
        marker = "os^Dv"[backends.index(str(backend)) % 5]
        colour = colours[str(arm)] if n_arms > 1 else f"C{contexts.index(context) % 10}"
        ax.plot(at["batch"], steps, marker=marker, linestyle=style, color=colour, label=label)
        points = [(int(b), s) for b, s in zip(at["batch"], steps, strict=True) if s == s]
        said.append(f"{label}: {points[0][1]:.1f} ms at batch {points[0][0]}"
                    + (f" to {points[-1][1]:.1f} ms at batch {points[-1][0]}" if len(points) > 1 else ""))
    ax.set_xticks(sorted(int(b) for b in levels["batch"].unique()))
    ax.set_xlabel("batch (concurrent requests)")
    ax.set_ylabel("decode step (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title("Batch scaling of the decode step")
    ax.grid(True, alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=8, frameon=False)
    fig.alt = ("Line chart of the decode step (ms, from the server's counters, medians over repeats) against "
               "batch size (concurrent requests), one line per " + ("arm and " if n_arms > 1 else "")
               + "context: " + "; ".join(said) + ".")
    return fig


def _level_label(row: Any, parts: Sequence[str]) -> str:
    """`after b4 c1024` for one level: the arm and backend only where the frame has several."""
    return " ".join([*(str(getattr(row, c)) for c in parts), f"b{row.batch} c{row.context}"])


def _varying(frame: pd.DataFrame) -> list[str]:
    return [c for c in ("arm", "backend") if frame[c].nunique() > 1]


def plot_decomposition(tables: DerivedTables) -> Plot | None:
    """Stacked shares of the decode window per level, one horizontal bar each: own steps, others' prefill,
    other. None where no level has the shares (no request records, as for a trace-only backend)."""
    levels = level_table(tables)
    columns = (("own_step_share", "own decode steps"), ("prefill_share", "others' prefill"),
               ("other_share", "gaps / other"))
    if not len(levels) or not _finite(levels[[c for c, _ in columns]].to_numpy().ravel()):
        return None
    levels = levels[[bool(_finite(r)) for r in levels[[c for c, _ in columns]].itertuples(index=False)]]
    parts = _varying(levels)
    labels = [_level_label(r, parts) for r in levels.itertuples(index=False)]
    fig = Plot(7.2, max(3.6, 1.6 + 0.24 * len(levels)))
    ax = fig.subplots()
    rows = list(range(len(levels)))[::-1]  # the first level on top, as in the table beside the figure
    left = [0.0] * len(levels)
    for col, name in columns:
        # own steps and others' prefill can overlap (a prefill chunk batched with decode rows):
        # their sum then passes 100% and the negative rest is drawn as nothing, not as a bar
        values = [0.0 if v != v else max(0.0, 100 * v) if col == "other_share" else 100 * v
                  for v in (_num(x) for x in levels[col])]
        ax.barh(rows, values, left=left, label=name, height=0.75)
        left = [a + v for a, v in zip(left, values, strict=True)]
    ax.axvline(100.0, color="black", linewidth=0.8)
    ax.set_xlim(0, 1.02 * max(100.0, *left))
    ax.set_yticks(rows)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("share of the decode window (%)")
    ax.set_ylabel("level: " + "".join(f"{p}, " for p in parts) + "\nb = batch (requests), c = context (tokens)",
                  fontsize=8)
    ax.set_title("Decode-window decomposition (median over requests)")
    ax.grid(True, axis="x", alpha=0.3)
    _legend_below(fig, ax, len(columns))
    own = [(100 * _num(v), label) for v, label in zip(levels["own_step_share"], labels, strict=True) if _num(v) == _num(v)]
    lo, hi = (min(own), max(own)) if own else (None, None)
    fig.alt = ("Stacked horizontal bars, one per level: the share of each request's decode window (%) that its "
               "own decode steps, other requests' prefill and the rest (gaps, other) explain, medians over "
               "requests and repeats" + (f"; own decode steps from {lo[0]:.0f}% ({lo[1]}) to {hi[0]:.0f}% ({hi[1]})"
                                         if own else "") + ".")
    return fig


def _group_keys(frame: pd.DataFrame) -> tuple[list[Any], list[str]]:
    """The (backend, batch, context) groups of per-arm bars, sorted, with their tick labels."""
    keys = frame[["backend", "batch", "context"]].drop_duplicates().sort_values(["backend", "batch", "context"])
    several = keys["backend"].nunique() > 1
    rows = list(keys.itertuples(index=False))
    return rows, [(f"{k.backend}\n" if several else "") + f"b{k.batch} c{k.context}" for k in rows]


def _value(frame: pd.DataFrame, arm: str, key: Any, column: str) -> float:
    """`column` of one arm at one (backend, batch, context); NaN where the arm lacks the level."""
    at = frame[(frame["arm"].astype(str) == arm) & (frame["backend"] == key.backend)
               & (frame["batch"] == key.batch) & (frame["context"] == key.context)]
    return _num(at[column].iloc[0]) if len(at) else float("nan")


def _grouped_bars(ax: Any, keys: Sequence[Any], labels: Sequence[str], arms: Sequence[str], colours: dict[str, str],
                  value: Any, spread: Any = None) -> None:
    """One group of bars per level key, one bar per arm in `colours[arm]`; `spread(arm, key)` gives the
    (min, max) drawn as whiskers."""
    width = 0.8 / len(arms)
    for i, arm in enumerate(arms):
        values = [value(arm, k) for k in keys]
        xs = [j + i * width for j in range(len(keys))]
        err = None
        if spread is not None:
            bounds = [spread(arm, k) for k in keys]
            err = [[v - lo if v == v else 0.0 for v, (lo, _) in zip(values, bounds, strict=True)],
                   [hi - v if v == v else 0.0 for v, (_, hi) in zip(values, bounds, strict=True)]]
        ax.bar(xs, values, width=width, label=arm, color=colours[arm], yerr=err, capsize=2,
               error_kw={"elinewidth": 0.8, "ecolor": "black"})
    ax.set_xticks([j + width * (len(arms) - 1) / 2 for j in range(len(keys))])
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_xlabel(LEVEL_AXIS, fontsize=8)


def plot_step_over_floor(tables: DerivedTables, campaign: Campaign) -> Plot | None:
    """Measured decode step over its memory-bandwidth floor per level, one bar per arm, with a line at 1x.
    None where no level has both (the campaign gives no model bytes or bandwidth, or no counters)."""
    table = floor_table(tables, campaign)
    table = table[[bool(_finite([v])) for v in table["step_over_floor"]]]
    if not len(table):
        return None
    arms = list(dict.fromkeys(str(a) for a in table["arm"]))
    keys, labels = _group_keys(table)
    fig = Plot(max(6.4, 0.35 * len(keys) * len(arms) + 2.5), 3.9)
    ax = fig.subplots()
    _grouped_bars(ax, keys, labels, arms, _arm_colours(tables), lambda arm, k: _value(table, arm, k, "step_over_floor"))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("decode step / memory floor (×)")
    ax.set_title("Decode step over the memory floor (1× = the floor)")
    ax.grid(True, axis="y", alpha=0.3)
    _legend_below(fig, ax, len(arms))
    ratios = [float(v) for v in table["step_over_floor"]]
    low, high = table.iloc[ratios.index(min(ratios))], table.iloc[ratios.index(max(ratios))]
    fig.alt = ("Grouped bars, one group per level and one bar per arm: the decode step over its memory-bandwidth "
               "floor (×; weights plus KV cache read once per step at peak bandwidth), with a line at 1×; from "
               f"{min(ratios):.1f}× ({low.arm} b{low.batch} c{low.context}) to {max(ratios):.1f}× "
               f"({high.arm} b{high.batch} c{high.context}).")
    return fig


def spread_table(tables: DerivedTables, columns: Sequence[str]) -> pd.DataFrame:
    """Per level: min and max over complete repeats of `columns` (`<col>_min`, `<col>_max`), from the runs
    table, beside `level_table`'s medians of the same runs."""
    runs = tables.runs
    out_cols = [*LEVEL_KEYS, *(f"{c}_{s}" for c in columns for s in ("min", "max"))]
    if runs is None or not len(runs):
        return pd.DataFrame(columns=out_cols)
    if "status" in runs.columns:
        runs = checks.usable(runs)
    runs = runs.assign(**{c: pd.to_numeric(runs[c], errors="coerce") for c in columns})
    grouped = runs.groupby(LEVEL_KEYS, sort=True, dropna=False)[list(columns)]
    out = grouped.min().add_suffix("_min").join(grouped.max().add_suffix("_max")).reset_index()
    return out[out_cols]


BEFORE_AFTER_PANELS = (("decode_step_ms", "decode step, counters (ms)"),
                       ("steady_step_ms", "steady step, client (ms)"))


def plot_before_after(tables: DerivedTables, arms: Sequence[str]) -> Plot | None:
    """Per level, one bar per arm: the decode step from the counters, and beside it the steady step
    (all requests decoding); bars are medians over repeats, whiskers the min and max. At long context
    the counter step includes the steps shared with other requests' prefill, so a change in how prefill
    overlaps decode moves the first panel alone; the second shows the decode step itself.
    None with fewer than two arms or no value in either panel."""
    levels = level_table(tables)
    if not len(levels):
        return None
    measured = set(levels["arm"].astype(str))
    arms = [str(a) for a in arms if str(a) in measured]  # an arm with no runs yet has no bar (the page says so)
    if len(arms) < 2:
        return None
    levels = levels[levels["arm"].astype(str).isin(arms)]
    columns = [c for c, _ in BEFORE_AFTER_PANELS]
    if not _finite(levels[columns].to_numpy().ravel()):
        return None
    spread = spread_table(tables, columns)
    keys, labels = _group_keys(levels)
    fig = Plot(max(9.6, 0.7 * len(keys) * len(arms) / 2 + 4), 4.0)
    axes = fig.subplots(1, 2)
    colours = _arm_colours(tables)
    for ax, (column, title) in zip(axes, BEFORE_AFTER_PANELS, strict=True):
        _grouped_bars(ax, keys, labels, arms, colours, lambda arm, k, col=column: _value(levels, arm, k, col),
                      lambda arm, k, col=column: (_value(spread, arm, k, f"{col}_min"),
                                                  _value(spread, arm, k, f"{col}_max")))
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(title.split(", ")[0] + " (ms)")
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Before / after (bars: median over repeats; whiskers: min to max)")
    _legend_below(fig, axes[0], len(arms))
    fig.alt = ("Two panels of grouped bars, one group per level (batch, context) and one bar per arm ("
               + ", ".join(arms) + "): the decode step from the server's counters (ms) and the steady step "
               "seen by the client (ms), medians over repeats with whiskers from the fastest to the slowest "
               "repeat.")
    return fig


def plot_profile(tables: DerivedTables) -> Plot | None:
    """GPU busy and host gap ms per step per traced level (stacked; medians over repeats), of the decode
    steps alone where the engine names its steps' phases (`decode_level_table`). None with no kernel trace."""
    table = decode_level_table(tables)
    if not len(table) or not _finite(table[["busy_ms_per_step", "gap_ms_per_step"]].to_numpy().ravel()):
        return None
    parts = _varying(table)
    labels = [_level_label(r, parts) for r in table.itertuples(index=False)]
    busy = [_num(v) for v in table["busy_ms_per_step"]]
    gap = [_num(v) for v in table["gap_ms_per_step"]]
    words = work_words(tables)
    fig = Plot(max(6.4, 0.6 * len(table) + 2), 4.0)
    ax = fig.subplots()
    ax.bar(range(len(table)), busy, label=words["busy"])
    ax.bar(range(len(table)), gap, bottom=busy, label="host gaps" if words["gap"] == "host gap" else words["gap"])
    ax.set_xticks(range(len(table)))
    ax.set_xticklabels(labels, fontsize=7, rotation=30 if parts else 0, ha="right" if parts else "center")
    ax.set_xlabel(("level: " + ", ".join(parts) + ", b = batch (requests), c = context (tokens)") if parts
                  else LEVEL_AXIS, fontsize=8)
    ax.set_ylabel("time per decode step (ms)")
    ax.set_title("GPU busy vs host gaps per decode step" if words["gap"] == "host gap"
                 else f"{words['busy']} vs {words['gap']} per decode step ({words['work']})")
    ax.grid(True, axis="y", alpha=0.3)
    _legend_below(fig, ax, 2)
    shares = [(g / (b + g), label) for b, g, label in zip(busy, gap, labels, strict=True) if b == b and g == g and b + g]
    what = ("GPU busy time and host gap time per decode step (ms), from the kernel traces" if words["gap"] == "host gap"
            else f"{words['busy']} time and {words['gap']} time per decode step (ms), from the traces ({words['work']})")
    fig.alt = (f"Stacked bars, one per traced level: {what}, medians over repeats" + (
                   f"; {'host gaps' if words['gap'] == 'host gap' else words['gap']} are {100 * min(shares)[0]:.0f}% ({min(shares)[1]}) to {100 * max(shares)[0]:.0f}% "
                   f"({max(shares)[1]}) of the step" if shares else "") + ".")
    return fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes with no Software/date metadata, so they depend on the data only."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def save_figure(fig: Figure, path: Path) -> Path:
    """Write `png_bytes(fig)` to `path` atomically (its folder made as needed)."""
    return atomic.write_atomic(path, png_bytes(fig))
