"""The levels a campaign's `question:` names, so that each candidate's answer opens with them.

A question is prose ("Where does the ~16K batch-4 step go, and does prefill interfere at ~1K?"): the
contexts it names are read as `~16K`, `16K`, `16k tokens`, `16384 tokens` or `context 16384`, the
batches as `batch 4`, `batch-4`, `batches 4 and 16`, `bs4` or `bs=16`. Only levels of the campaign's
matrix count (a `~16K` names the context of 16,384 or 16,000 tokens, whichever the matrix has); the
rest of the text is not read. `batch-B` or `batch B` names no batch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_KILO = re.compile(r"(?<![\w.])~?\s?(\d+(?:\.\d+)?)\s?[kK](?![a-zA-Z])")
_TOKENS = re.compile(r"\b(\d{2,7})\s*(?:-\s*)?tokens?\b|\bcontexts?\s+(?:of\s+)?(\d{2,7})\b")
_BATCH = re.compile(r"\b(?:batch(?:es)?|concurrency)[\s-]*(?:sizes?\s*)?(\d+(?:\s*(?:,|and|or|&|/)\s*\d+)*)",
                    re.IGNORECASE)
_BS = re.compile(r"\bbs\s*=?\s*(\d+)\b", re.IGNORECASE)


def _kilo_matches(value: float, contexts: Sequence[int]) -> list[int]:
    """The contexts a `~16K` names: 16 x 1024 or 16 x 1000 tokens, within a quarter of a K."""
    return [c for c in contexts if abs(c / 1024 - value) <= 0.25 or abs(c / 1000 - value) <= 0.25]


def question_levels(question: str, batches: Sequence[int], contexts: Sequence[int]) -> tuple[tuple[int, ...],
                                                                                           tuple[int, ...]]:
    """(contexts, batches) of the matrix that `question` names, each in the order it names them first."""
    text = question or ""
    found_contexts: list[tuple[int, int]] = []  # (position, context)
    for match in _KILO.finditer(text):
        found_contexts += [(match.span()[0], c) for c in _kilo_matches(float(match.group(1)), contexts)]
    for match in _TOKENS.finditer(text):
        value = int(match.group(1) or match.group(2))
        if value in contexts:
            found_contexts.append((match.span()[0], value))
    found_batches: list[tuple[int, int]] = []
    for match in [*_BATCH.finditer(text), *_BS.finditer(text)]:
        for number in re.finditer(r"\d+", match.group(1)):
            if int(number.group()) in batches:
                found_batches.append((match.span(1)[0] + number.span()[0], int(number.group())))
    return (tuple(dict.fromkeys(c for _, c in sorted(found_contexts))),
            tuple(dict.fromkeys(b for _, b in sorted(found_batches))))


def context_label(context: int) -> str:
    """A context as the field says it: `~1K` for 1,024 tokens, `~16K` for 16,384 (or 16,000), else
    `256 tokens`."""
    context = int(context)
    for unit in (1024, 1000):
        if context >= unit and context % unit == 0:
            return f"~{context // unit}K"
    return f"{context} tokens"
