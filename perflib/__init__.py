"""perflib: why is batched decode slower than it should be, and did my change fix it?

Collect (`traces`, `metrics`, `load`, `server`, `config`), arithmetic (`runs`, `attribution`), tables
and decisions (`derive`, `verdicts`), the page (`report`), and on top the orchestration (`sweep`,
`campaign`, `explore`). Everything downstream of a reader sees one schema, in nanoseconds.
docs/ARCHITECTURE.md is the map.
"""

from perflib.version import __version__

__all__ = ["__version__", "open_campaign"]


def __getattr__(name: str):
    """`perflib.open_campaign` without importing pandas at `import perflib`."""
    if name == "open_campaign":
        from perflib.explore import open_campaign  # late: pandas and the page; `import perflib` stays light

        return open_campaign
    raise AttributeError(f"module 'perflib' has no attribute {name!r}")
