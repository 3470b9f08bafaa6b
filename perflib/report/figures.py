"""The page's figures, drawn with matplotlib on the Agg backend and saved as PNGs that depend on the data only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perflib.config import Campaign
from perflib.derive import DerivedTables
from perflib.report.tables import floor_table, level_table, trace_level_table


def _figure(width: float = 6.4, height: float = 3.6, ncols: int = 1):
    """A figure on the Agg backend: (fig, ax), or (fig, axes) with `ncols` > 1."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, ncols, figsize=(width, height), dpi=100)
    return fig, ax


def _series_label(arm: str, backend: str, context: Any, arms: int, backends: int) -> str:
    parts = []
    if arms > 1:
        parts.append(str(arm))
    if backends > 1:
        parts.append(str(backend))
    parts.append(f"ctx {context}")
    return " ".join(parts)


def plot_batch_scaling(tables: DerivedTables):
    """Decode step ms against batch size, one line per (arm, backend, context)."""
    levels = level_table(tables)
    fig, ax = _figure()
    if len(levels):
        n_arms, n_backends = levels["arm"].nunique(), levels["backend"].nunique()
        for (arm, backend, context), at in levels.groupby(["arm", "backend", "context"], sort=True):
            at = at.sort_values("batch")
            ax.plot(at["batch"], at["decode_step_ms"], marker="o",
                    label=_series_label(arm, backend, context, n_arms, n_backends))
        ax.set_xticks(sorted(levels["batch"].unique()))
        ax.legend(fontsize=8)
    ax.set_xlabel("batch (concurrent requests)")
    ax.set_ylabel("decode step (ms)")
    ax.set_title("Batch scaling of the decode step")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def _level_labels(frame) -> list[str]:
    """Short x labels for per-level bars: the arm and backend only where the frame has several."""
    parts = [c for c in ("arm", "backend") if frame[c].nunique() > 1]
    return ["\n".join([*(str(getattr(r, c)) for c in parts), f"b{r.batch} c{r.context}"])
            for r in frame.itertuples(index=False)]


def plot_decomposition(tables: DerivedTables):
    """Stacked shares of the decode window per level: own steps, others' prefill, other."""
    levels = level_table(tables)
    fig, ax = _figure(max(6.4, 0.5 * len(levels) + 2), 3.8)
    if len(levels):
        labels = _level_labels(levels)
        bottom = [0.0] * len(levels)
        for col, name in (("own_step_share", "own decode steps"), ("prefill_share", "others' prefill"),
                          ("other_share", "gaps / other")):
            # own steps and others' prefill can overlap (a prefill chunk batched with decode rows):
            # their sum then passes 100% and the negative rest is drawn as nothing, not as a bar
            values = [0.0 if v != v else max(0.0, 100 * float(v)) if col == "other_share" else 100 * float(v)
                      for v in levels[col]]
            ax.bar(range(len(levels)), values, bottom=bottom, label=name)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.legend(fontsize=8)
    ax.set_ylabel("share of the decode window (%)")
    ax.set_title("Decode-window decomposition (median over requests)")
    fig.tight_layout()
    return fig


def plot_step_over_floor(tables: DerivedTables, campaign: Campaign):
    """Measured decode step over its memory-bandwidth floor per level (empty where unknown)."""
    table = floor_table(tables, campaign).dropna(subset=["step_over_floor"])
    fig, ax = _figure()
    if len(table):
        labels = [f"b{r.batch} c{r.context}" for r in table.itertuples(index=False)]
        ax.bar(range(len(table)), table["step_over_floor"].astype(float))
        ax.set_xticks(range(len(table)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
    else:
        ax.text(0.5, 0.5, "no floor: model bytes or device bandwidth not given", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_ylabel("step / floor (x)")
    ax.set_title("Decode step over the memory floor")
    fig.tight_layout()
    return fig


def plot_before_after(tables: DerivedTables, arms: Sequence[str]):
    """Per level, one bar per arm (medians over repeats): the decode step from the counters, and beside
    it the steady step (all requests decoding). At long context the counter step includes the steps
    shared with other requests' prefill, so a change in how prefill overlaps decode moves the first
    panel alone; the second shows the decode step itself."""
    levels = level_table(tables)
    n_keys = levels[["backend", "batch", "context"]].drop_duplicates().shape[0] if len(levels) else 0
    fig, axes = _figure(max(9.6, 1.0 * n_keys + 3), 3.6, ncols=2)
    panels = (("decode_step_ms", "decode step, counters (ms)"), ("steady_step_ms", "steady step, client (ms)"))
    if len(levels) and len(arms) > 1:
        keys = levels[["backend", "batch", "context"]].drop_duplicates().sort_values(["backend", "batch", "context"])
        width = 0.8 / len(arms)
        for ax, (column, title) in zip(axes, panels, strict=True):
            for i, arm in enumerate(arms):
                values = []
                for k in keys.itertuples(index=False):
                    at = levels[(levels["arm"].astype(str) == arm) & (levels["backend"] == k.backend)
                                & (levels["batch"] == k.batch) & (levels["context"] == k.context)]
                    # a level one arm lacks is a gap in the plot, not a 0 ms step
                    values.append(float(at[column].iloc[0]) if len(at) else float("nan"))
                ax.bar([j + i * width for j in range(len(keys))], values, width=width, label=arm)
            ax.set_xticks([j + width * (len(arms) - 1) / 2 for j in range(len(keys))])
            ax.set_xticklabels([f"b{k.batch} c{k.context}" for k in keys.itertuples(index=False)], fontsize=7)
            ax.set_title(title, fontsize=10)
            ax.set_ylabel("ms")
        axes[0].legend(fontsize=8)
    else:
        for ax in axes:
            ax.text(0.5, 0.5, "one arm: no before/after", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle("Before / after")
    fig.tight_layout()
    return fig


def plot_profile(tables: DerivedTables):
    """GPU busy and host gap ms per step per traced level (stacked; medians over repeats)."""
    table = trace_level_table(tables)
    fig, ax = _figure(max(6.4, 0.6 * len(table) + 2), 3.8)
    if len(table):
        labels = _level_labels(table)
        busy = [float(v) for v in table["busy_ms_per_step"]]
        gap = [float(v) for v in table["gap_ms_per_step"]]
        ax.bar(range(len(table)), busy, label="GPU busy")
        ax.bar(range(len(table)), gap, bottom=busy, label="host gaps")
        ax.set_xticks(range(len(table)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no kernel trace", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("ms per step")
    ax.set_title("GPU busy vs host gaps per decode step")
    fig.tight_layout()
    return fig


def save_figure(fig, path: Path) -> Path:
    """PNG with no Software/date metadata, so the bytes depend on the data only."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path
