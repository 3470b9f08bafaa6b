"""One TLS context for every httpx client perflib makes.

httpx builds a fresh `ssl.SSLContext` for each client and loads the CA bundle into it: about 24 ms
each on the 2-core machine, three times a level (the level's client, its scrape client, the
identity check), which came to a third of a level's CPU outside its clocks. The context is
built once per process, the way httpx builds it (certifi's bundle), and shared: clients only read it.
"""

from __future__ import annotations

import functools
import ssl

import certifi


@functools.lru_cache(maxsize=1)
def context() -> ssl.SSLContext:
    """The process's TLS context: certifi's CA bundle, as httpx's default."""
    return ssl.create_default_context(cafile=certifi.where())
