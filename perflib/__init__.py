"""perflib: why is batched decode slower than it should be, and did my change fix it?

Counters (`metrics`), load (`load`, `sweep`), traces (`traces`, `attribution`), verdicts and
results pages (`verdicts`, `report`, `campaign`). Everything downstream of a reader sees one
schema, in nanoseconds.
"""

__version__ = "0.1.0"
