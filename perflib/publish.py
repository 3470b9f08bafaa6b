"""One publish step: a campaign's tables, page inputs, verdicts, gates, checks and run states, each made once.

`publish(campaign)` rebuilds `data/derived/<campaign>/` from `data/raw` (`perflib.derive`), resolves the
page's other inputs and writes them beside it (`perflib.pageinputs`), decides the candidates, gates and level
checks once (`perflib.verdicts.Decisions`), counts the run folders' states once (`RunStates`) and writes the
page from those alone (`perflib.report`). Where the campaign names another run of itself (`agree_with`, or
`perflib campaign report --agree-with DIR`), that run's derived tables are decided once too (`Decisions.of`)
and the two answers held against each other (`perflib.verdicts.agreement`) for the page and `--json`. The
one frozen `Published` it returns is what the page, the `--json` and terminal lines of `perflib campaign run`
and `report`, and `perflib.open_campaign` show: none of them derives or decides again. `Published.of(campaign, tables)` is the same without writing anything (a
notebook's look at the raw data); `end_run` is the runner's end: the page published, this invocation's
failures split as the page splits them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perflib import derive, pageinputs, rundir
from perflib.config import Campaign, RunSpec
from perflib.derive import DerivedTables
from perflib.pageinputs import PageInputs
from perflib.verdicts import Decisions, GateResult, Verdict, answer_dict
from perflib.verdicts import agreement as agree


def _truthy(value: Any) -> bool:
    """A `steps_guessed` cell: a bool as built, or its text as read back from CSV."""
    return str(value).lower() in ("true", "1")


@dataclass(frozen=True)
class RunStates:
    """The run folders' states as the page counts them: complete of all; the runs not complete (failed);
    the complete runs whose trace was lost, cut short or not attributed (partial, with the page's why, as
    runs.csv's `trace_loss` holds it); the traced runs whose steps are the dispatch rhythm's guess."""

    complete: int = 0
    total: int = 0
    failed: tuple[str, ...] = ()
    partial: tuple[tuple[str, str], ...] = ()
    steps_guessed: tuple[str, ...] = ()

    @classmethod
    def of(cls, tables: DerivedTables) -> RunStates:
        runs, traced = tables.runs, tables.trace_runs
        rows = list(runs.itertuples(index=False)) if len(runs) else []
        status = [str(getattr(r, "status", "")) for r in rows]
        loss = [t if isinstance(t := getattr(r, "trace_loss", ""), str) else "" for r in rows]
        guessed = tuple(RunSpec.label_of(r) for r in traced.itertuples(index=False)
                        if _truthy(getattr(r, "steps_guessed", ""))) if len(traced) else ()
        return cls(complete=status.count("complete"), total=len(rows),
                   failed=tuple(RunSpec.label_of(r) for r, st in zip(rows, status, strict=True) if st != "complete"),
                   partial=tuple((RunSpec.label_of(r), why) for r, st, why in zip(rows, status, loss, strict=True)
                                 if st == "complete" and why.strip()),
                   steps_guessed=guessed)

    @property
    def on_disk(self) -> tuple[int, int]:
        """(complete, all) run folders."""
        return self.complete, self.total

    def to_dict(self) -> dict[str, Any]:
        """The counts as `perflib campaign report --json` gives them."""
        return {"runs_complete": self.complete, "runs_total": self.total, "failed": list(self.failed),
                "partial": [{"run": run, "why": why.strip()} for run, why in self.partial],
                "steps_guessed": list(self.steps_guessed)}


@dataclass(frozen=True)
class Published:
    """A campaign's derived tables with everything decided over them once: the verdicts, gates and level
    checks (`decisions`), the answer as JSON-ready data (`perflib.verdicts.answer_dict`) and the run states;
    with the page's other inputs and the page's path where `publish` wrote it (None where nothing was)."""

    campaign: Campaign
    tables: DerivedTables
    decisions: Decisions
    answer: dict[str, Any]
    runs: RunStates
    inputs: PageInputs | None = None
    page: Path | None = None
    agreement: agree.Agreement | None = None
    """This run against the campaign's `agree_with` run, where it names one and `publish` resolved it."""

    @classmethod
    def of(cls, campaign: Campaign, tables: DerivedTables) -> Published:
        """What `tables` say, decided once; nothing is read or written."""
        decisions = Decisions.of(campaign, tables)
        return cls(campaign, tables, decisions, answer_dict(campaign, tables, decisions), RunStates.of(tables))

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        return self.decisions.verdicts

    @property
    def gates(self) -> tuple[GateResult, ...]:
        return self.decisions.gates


def publish(campaign: Campaign, data_dir: Path | None = None, reports_dir: Path | None = None,
            date: str | None = None, decided: Published | None = None) -> Published:
    """Rebuild `<data>/derived/<campaign>/` from `<data>/raw` (`data_dir`, default the campaign's), write the
    page's inputs beside it, decide once and write the page into `reports_dir` (default the campaign's), dated
    `date` (default the day the last run ended). `decided`: what was decided already over tables built from the
    same data (a notebook's), whose tables are written instead of rebuilt."""
    from perflib import report  # late: matplotlib and jinja2, loaded by a runner only for the page

    if decided is None:
        decided = Published.of(campaign, derive.rebuild(campaign, data_dir))
    else:
        derive.write(decided.tables, campaign.derived_dir(data_dir))
    inputs = pageinputs.build_and_write(campaign, data_dir, reports_dir)
    agreed = agreement_of(campaign, decided.tables, decided.decisions, inputs)
    page = report.write_report(campaign, decided.tables, inputs, decided.decisions, date, agreement=agreed)
    return replace(decided, inputs=inputs, page=page, agreement=agreed)


def agreement_of(campaign: Campaign, tables: DerivedTables, decisions: Decisions, inputs: PageInputs
                 ) -> agree.Agreement | None:
    """This run (`tables`, as `decisions` decided them) against the `agree_with` run of `inputs`, whose tables
    are decided here, once; None where the campaign names none."""
    other = inputs.agree
    if other is None:
        return None
    ours = agree.RunSide(other.this_label, tables, decisions, other.signals_of(other.this_label))
    theirs = agree.RunSide(other.label, other.tables, Decisions.of(campaign, other.tables),
                               other.signals_of(other.label))
    return agree.of(campaign, ours, theirs, str(other.data_dir))


@dataclass(frozen=True)
class RunEnd:
    """A campaign run's end: this invocation's failures split as the page splits them, and what `publish`
    made (None where the page was not to be written)."""

    failed: tuple[tuple[str, str], ...]
    partial: tuple[tuple[str, str], ...]
    published: Published | None = None

    @property
    def page(self) -> Path | None:
        return self.published.page if self.published else None

    @property
    def on_disk(self) -> tuple[int, int] | None:
        """(complete, all) run folders of the campaign, as the page counts them (None: no page written)."""
        return self.published.runs.on_disk if self.published else None

    @property
    def steps_guessed(self) -> tuple[str, ...]:
        return self.published.runs.steps_guessed if self.published else ()


def end_run(campaign: Campaign, data_dir: Path, reports_dir: Path | None, failures: Sequence[tuple[str, str]],
            write_page: bool = True) -> RunEnd:
    """After a campaign run: the page published from the run folders in `data_dir` (where `write_page`), and
    the invocation's `failures` (run label, error) split as the page splits them: a run whose folder is
    incomplete failed; one that is complete but whose capture, cut or profile failed is partial, its counters
    used. Every run the page names under Trace lost is partial too, with the page's why."""
    published = publish(campaign, data_dir, reports_dir) if write_page else None
    runs = {r.label: r for r in campaign.expand()}
    failed, partial = [], {}
    for label, error in failures:
        run = runs.get(label)
        if run is not None and rundir.is_complete(run.run_dir(data_dir)):
            partial.setdefault(label, error)
        else:
            failed.append((label, error))
    if published is not None:
        partial.update(published.runs.partial)
    return RunEnd(tuple(failed), tuple(sorted(partial.items())), published)
