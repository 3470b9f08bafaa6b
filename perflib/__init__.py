"""perflib: why is batched decode slower than it should be, and did my change fix it?

Counters (`metrics`), load (`load`, `sweep`), traces (`traces`, `attribution`), verdicts and
results pages (`verdicts`, `report`, `campaign`). Everything downstream of a reader sees one
schema, in nanoseconds.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`perflib.open_campaign` without importing pandas at `import perflib`."""
    if name == "open_campaign":
        from perflib.explore import open_campaign

        return open_campaign
    raise AttributeError(f"module 'perflib' has no attribute {name!r}")
