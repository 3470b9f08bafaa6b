"""Cut whole activity records out of cupti_trace_injection's text output, keeping them as printed.

Why: a full trace of a PyTorch process is hundreds of thousands of records; tests need a small,
real sample. A record is a line starting with an upper-case kind (`CONCURRENT_KERNEL [`,
`RUNTIME [`, `MEMCPY "DtoD" [`, `MEMORY2 [` ...) plus the lines after it up to the next record
(tab-started continuations; MEMORY2's two-space continuations and blank line). Lines before the
first record (the sample's own "Calling CUPTI API"/"Enabling ..." messages) are kept when the
cut starts at the top. `--from-ns T` starts instead at the first record whose first timestamp
is >= T (e.g. the start of the decode window); such an excerpt has no header lines.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import re
import sys
from pathlib import Path

RECORD = re.compile(r"^([A-Z][A-Z0-9_]+) ")
FIRST_TS = re.compile(r"\[ (\d+)")


def open_text(path: Path):
    return gzip.open(path, "rt", errors="replace") if path.suffix == ".gz" else path.open(errors="replace")


def cut(lines, records: int, from_ns: int | None) -> tuple[list[str], collections.Counter]:
    """Lines of the first `records` whole records (from `from_ns` on, if given), and their kinds."""
    out: list[str] = []
    kinds: collections.Counter = collections.Counter()
    started = from_ns is None
    for line in lines:
        m = RECORD.match(line)
        if m:
            if not started:
                ts = FIRST_TS.search(line)
                if ts is None or int(ts.group(1)) < from_ns:
                    continue
                started = True
            if sum(kinds.values()) == records:
                break
            kinds[m.group(1)] += 1
        elif not started:
            continue
        out.append(line)
    return out, kinds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path, help="the sample's stdout, plain or .gz")
    p.add_argument("dst", type=Path, help="output .txt.gz")
    p.add_argument("--records", type=int, default=3000)
    p.add_argument("--from-ns", type=int, default=None)
    args = p.parse_args()
    with open_text(args.src) as f:
        lines, kinds = cut(f, args.records, args.from_ns)
    if not kinds:
        print(f"{args.src}: no activity record found", file=sys.stderr)
        return 1
    args.dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(args.dst, "wb", compresslevel=9, mtime=0) as g:
        g.write("".join(lines).encode())
    print(f"{args.dst}: {sum(kinds.values())} records, {len(lines)} lines, "
          f"{args.dst.stat().st_size / 1e3:.1f} kB gz; kinds {dict(kinds)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
