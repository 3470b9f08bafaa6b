"""Campaigns on top of everything: load and check a campaign file, run its matrix, guard the GPU.

- `validate`: `load_campaign(path)`, the campaign file checked against everything perflib knows.
- `runner`: `CampaignRun(campaign, RunOptions(...)).run()` (`run_campaign` for short), every incomplete
  run measured in this process (or, `papermill=True`, through collect.ipynb in a kernel), each traced run
  attributed once at the end of its arm, then the page.
- `options`: `RunOptions`, how a campaign is run, built by the command line and by `open_campaign().run()`.
- `measure`: one run measured (`measure`, `collect_run`) and one trace attributed (`attribute`,
  `profile_run` of a `ProfileSpec`), in the runner's process or from a notebook.
- `servers`: each (arm, backend) server started from its preset or command under its profiler,
  restarted where it died, stopped at the end; `server.json` records every start.
- `captures`: a stopped server's lifetime capture cut into the runs it served.
- `claims`: one runner per (arm, backend), whichever host, over a shared data folder.
- `cluster`, `worker`, `transfer`: `RunOptions(cluster=...)`: each (arm, backend) on a Dask worker, as a
  `campaign run --only` child there, its files copied back in bounded chunks and checked (docs/CLUSTER.md).
- `notebooks`: the notebooks executed with papermill (`--papermill`, `--notebook-export`).
- `records`: a run's collect.ipynb and profile.ipynb written from its results, no kernel.
- `guard`: the GPU guard that redoes contended runs.
- `contention`: runs that other work on the CPUs contended, redone within a wait budget and said as it happens.

The campaign file's keys themselves are declared in `perflib.config`.
"""

from perflib.campaign.guard import GUARD_EXIT, GpuGuard
from perflib.campaign.measure import ProfileSpec, collect_run, profile_run
from perflib.campaign.notebooks import NOTEBOOKS, execute_notebook, export_notebook, find_kernel
from perflib.campaign.options import RunOptions
from perflib.campaign.runner import CampaignResult, CampaignRun, run_campaign
from perflib.campaign.servers import ServedArm, host_name, plan_launch, prepare
from perflib.campaign.validate import load_campaign

__all__ = [
    "GUARD_EXIT", "NOTEBOOKS", "CampaignResult", "CampaignRun", "GpuGuard", "ProfileSpec", "RunOptions",
    "collect_run", "execute_notebook", "export_notebook", "ServedArm", "find_kernel", "host_name", "load_campaign",
    "plan_launch", "prepare", "profile_run", "run_campaign",
]
