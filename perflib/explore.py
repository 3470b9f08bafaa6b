"""The front object of a campaign: `perflib.open_campaign(path)`.

It reads the campaign file and derives the tables from `data/raw` on first use (nothing is
cached on disk, so a notebook always shows what the raw data says), decides its verdicts, gates and
checks over them once (`perflib.publish.Published`: what the page and `perflib campaign report --json`
show), and delegates each other question to a pure function: the derived tables (`perflib.derive`),
the page's other inputs (`perflib.pageinputs`), the page's tables (`perflib.report.tables`) and its
figures (`perflib.report.figures`). `write_report` publishes the page from the same tables and decisions
(`perflib.publish.publish`).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import pandas as pd

from perflib import derive, pageinputs
from perflib import verdicts as verdict_mod
from perflib.campaign import CampaignResult, CampaignRun, RunOptions, load_campaign
from perflib.config import Campaign, opening_question, replace_data_dir
from perflib.errors import InputError
from perflib.publish import Published, publish
from perflib.report import figures, markdown, page
from perflib.report import tables as page_tables


class CampaignView:
    """One campaign's data: `.runs`, `.levels`, `.kernels`, `.classes`, `.gaps`, `.steps`,
    `.trace_runs`, `.host_gaps` as DataFrames, `.verdicts()`, `.gates()` and the `plot_*` figures."""

    def __init__(self, campaign: Campaign):
        self.campaign = campaign

    def __repr__(self) -> str:
        return (f"CampaignView({self.campaign.name!r}, runs={len(self.runs)}, traced={len(self.trace_runs)}, "
                f"data={self.campaign.data_dir})")

    @cached_property
    def tables(self) -> derive.DerivedTables:
        """The derived tables, built from `data/raw` on first use."""
        return derive.build(self.campaign)

    @cached_property
    def published(self) -> Published:
        """The tables' verdicts, gates, checks, answer and run states, decided once on first use (nothing
        written): what `.verdicts()`, `.gates()`, `.summary()` and `.write_report()` show."""
        return Published.of(self.campaign, self.tables)

    @property
    def runs(self) -> pd.DataFrame:
        return self.tables.runs

    @property
    def trace_runs(self) -> pd.DataFrame:
        return self.tables.trace_runs

    @property
    def kernels(self) -> pd.DataFrame:
        return self.tables.kernels

    @property
    def classes(self) -> pd.DataFrame:
        return self.tables.classes

    @property
    def gaps(self) -> pd.DataFrame:
        return self.tables.gaps

    @property
    def steps(self) -> pd.DataFrame:
        return self.tables.steps

    @property
    def host_gaps(self) -> pd.DataFrame:
        """What fills each traced run's host gaps (sync and copy wait, launch, other API, host compute)."""
        return self.tables.host_gaps

    def host_gap_split(self) -> pd.DataFrame:
        """Per traced level: what fills the host gap, ms per step and share of the gap (or why not)."""
        return page_tables.host_gap_level_table(self.tables)

    @property
    def notes(self) -> tuple[str, ...]:
        return self.tables.notes

    @property
    def levels(self) -> pd.DataFrame:
        """Medians over repeats per (arm, backend, batch, context)."""
        return page_tables.level_table(self.tables)

    def decomposition(self) -> pd.DataFrame:
        return self.levels[[*page_tables.LEVEL_KEYS, "own_step_share", "prefill_share", "other_share"]]

    def step_over_floor(self) -> pd.DataFrame:
        return page_tables.floor_table(self.tables, self.campaign)

    def before_after(self) -> pd.DataFrame:
        return page_tables.before_after_table(self.tables, list(self.campaign.comparisons))

    def profile(self) -> pd.DataFrame:
        """Per traced level: steps, step ms, GPU busy and host gap ms per step."""
        return page_tables.trace_level_table(self.tables)

    def reference_ratio(self) -> pd.DataFrame:
        return page_tables.ratio_table(self.tables, [b.name for b in self.campaign.backends],
                                  self.campaign.other_backends, self.campaign.batches,
                                  [a.name for a in self.campaign.compared_arms],
                                  references=pageinputs.references(self.campaign),
                                  other_note=self.campaign.other_backends_note)

    def verdict_list(self) -> list[verdict_mod.Verdict]:
        return list(self.published.verdicts)

    def verdicts(self) -> pd.DataFrame:
        """One row per (candidate, scope): outcome with its number and threshold."""
        return verdict_mod.verdict_table(self.verdict_list())

    def gates(self) -> list[verdict_mod.GateResult]:
        return list(self.published.gates)

    # Each plot is the page's figure: a matplotlib Figure made without pyplot (the kernel's backend and
    # pyplot's figures stay as they were) that shows as a PNG when it is a cell's value, with its alt
    # text in `.alt`; None, and no output, where there is nothing to draw.

    def plot_batch_scaling(self) -> figures.Plot | None:
        """Decode step against batch size, one line per arm and context (None: no counters)."""
        return figures.plot_batch_scaling(self.tables)

    def plot_decomposition(self) -> figures.Plot | None:
        """Shares of the decode window per level: own steps, others' prefill, other (None: no records)."""
        return figures.plot_decomposition(self.tables)

    def plot_step_over_floor(self) -> figures.Plot | None:
        """Decode step over its memory floor per level (None: no model bytes or bandwidth)."""
        return figures.plot_step_over_floor(self.tables, self.campaign)

    def plot_before_after(self) -> figures.Plot | None:
        """Each compared arm per level with min-max whiskers over repeats (None: one arm)."""
        return figures.plot_before_after(self.tables, [a.name for a in self.campaign.compared_arms])

    def plot_profile(self) -> figures.Plot | None:
        """GPU busy and host gaps per decode step per traced level (None: no kernel trace)."""
        return figures.plot_profile(self.tables)

    def summary(self) -> markdown.MarkdownText:
        """The page's opening: the verdict per candidate, the before/after headline and gates, what was
        not measured, the checks (rendered as Markdown in Jupyter and in the export)."""
        return markdown.MarkdownText(page.summary_markdown(self.campaign, self.tables, self.published.decisions,
                                                           opening_question(self.campaign)[0]))

    @staticmethod
    def markdown(frame: pd.DataFrame, digits: int = 3) -> markdown.MarkdownText:
        """Any of these DataFrames as a GitHub Markdown table (what `--notebook-export` should hold)."""
        return markdown.frame_table(frame, digits)

    def run(self, cluster: str | None = None, data_dir: str | Path | None = None,
            reports_dir: str | Path | None = None, **options) -> CampaignResult:
        """Measure the campaign's incomplete runs and write its page (`perflib.campaign.CampaignRun` with
        `perflib.campaign.RunOptions(**options)`: `guard`, `only`, `contention_threshold`, `papermill`, ...);
        `cluster`, a Dask scheduler's address, spreads its (arm, backend) groups over the workers
        (`perflib campaign run --cluster`). The tables are read afresh afterwards."""
        result = CampaignRun(self.campaign, RunOptions(cluster=cluster, **options), Path(data_dir) if data_dir else None,
                             Path(reports_dir) if reports_dir else None).run()
        for name in ("tables", "published"):  # the cached_properties: the next look reads the new run folders
            self.__dict__.pop(name, None)
        return result

    def write_derived(self) -> Path:
        derive.write(self.tables, self.campaign.derived_dir())
        return self.campaign.derived_dir()

    def write_report(self, reports_dir: str | Path | None = None, date: str | None = None) -> Path:
        """Write the derived tables, the page's inputs and the page (`perflib.publish.publish`), from these
        tables and what was decided over them."""
        return publish(self.campaign, reports_dir=Path(reports_dir) if reports_dir else None, date=date,
                       decided=self.published).page


SAMPLE_CAMPAIGN = Path(__file__).resolve().parents[1] / "tests" / "data" / "campaign-sample" / "campaign.yaml"
"""The committed sample capture of a checkout: what the notebooks open by default."""


def project_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds `campaigns/` or `pyproject.toml`: the project a
    notebook's kernel runs in (JupyterLab starts it in the notebook's folder, `notebooks/` say)."""
    for folder in (start, *start.parents):
        if (folder / "campaigns").is_dir() or (folder / "pyproject.toml").is_file():
            return folder
    return None


def find_campaign_file(path: str | Path, cwd: Path | None = None) -> Path:
    """A campaign file named relative to the working folder or to the project: `cwd / path` if it is a file,
    else `project_root(cwd) / path`; an absolute path as it is. An InputError says where it looked."""
    given = Path(path).expanduser()
    if given.is_absolute():
        return given
    here = Path.cwd() if cwd is None else cwd
    tried = [here / given]
    root = project_root(here)
    if root is not None and root != here:
        tried.append(root / given)
    if tried[0].is_file():
        return given if cwd is None else tried[0]  # as given, as before
    if len(tried) > 1 and tried[1].is_file():
        return tried[1]
    places = " and ".join(str(c) for c in tried)
    hint = "" if root is not None else " (no folder holding campaigns/ or pyproject.toml at or above it)"
    raise InputError(path, None, f"a campaign file, relative to the working folder or the project; looked at "
                     f"{places}{hint}", "no such file")


def open_campaign(path: str | Path | None = None, data_dir: str | Path | None = None) -> CampaignView:
    """Open a campaign YAML file; `data_dir` overrides where `raw/` and `derived/` live.

    A relative path is looked for from the kernel's folder first, then from the project's root (the
    nearest folder above holding `campaigns/` or `pyproject.toml`), so
    `open_campaign("campaigns/cuda-h200.yaml")` works from the repository root and from `notebooks/`
    alike. None opens the checkout's sample capture (`SAMPLE_CAMPAIGN`), so a notebook's defaults work
    whatever folder its kernel runs in (the repository root under papermill, `notebooks/` under nbval
    and JupyterLab)."""
    if path is None:
        if not SAMPLE_CAMPAIGN.is_file():
            raise InputError(SAMPLE_CAMPAIGN, None, "the sample campaign of a checkout (perflib is installed "
                             "apart from one); pass a campaign file", "no such file")
        path = SAMPLE_CAMPAIGN
    campaign = load_campaign(find_campaign_file(path))
    if data_dir is not None:
        campaign = replace_data_dir(campaign, Path(data_dir), None)
    return CampaignView(campaign)
