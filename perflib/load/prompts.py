"""Prompts of a target token length, measured with the server's own tokenizer, distinct per request."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from perflib.errors import PerflibError
from perflib.load.identity import json_object

ESTIMATE_CHARS_PER_TOKEN = 4.0
"""Prompt-size estimate where the server has no `/tokenize`: about 4 characters per token."""

_FILLER_WORDS = (
    "the quick brown fox jumps over a lazy dog while seven bright lanterns glow above "
    "quiet river towns where people gather each evening to share bread stories and songs "
    "about distant mountains green valleys old bridges cold winters and warm summer nights "
    "under a sky full of stars that sailors once used to find their way home across the sea"
).split()
"""Plain English words: about one Llama-3 token each, so prompt length scales smoothly."""


class ServerUnreachable(PerflibError):
    """The server refused or dropped the connection before the level could start."""



@dataclass(frozen=True)
class Prompt:
    """A prompt and its size in tokens as the server will evaluate it (BOS and template included)."""

    text: str
    tokens: int | None
    method: str  # "tokenize" | "estimate"


class TokenCounter:
    """Count prompt tokens with the server's own tokenizer (llama.cpp `/tokenize`), or estimate.

    Completions: `/tokenize` of the prompt with `add_special` (BOS counted, as the server adds it).
    Chat: the server's `/apply-template` renders the messages, then `/tokenize` counts the
    rendered prompt with BOS: the template's header tokens are included, so the count is what
    `usage.prompt_tokens` reports. Without `/tokenize` (or `/apply-template` for chat) the count
    is an estimate of one token per `ESTIMATE_CHARS_PER_TOKEN` characters, method `estimate`.
    """

    def __init__(self, client: httpx.AsyncClient, base_url: str, endpoint: str):
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.endpoint = endpoint
        self.method: str | None = None  # decided by the first call

    async def _post(self, path: str, body: dict) -> dict | None:
        try:
            resp = await self.client.post(self.base_url + path, json=body, headers={"Connection": "close"})
        except httpx.ConnectError as exc:
            raise ServerUnreachable(
                f"cannot connect to {self.base_url}{path}: {exc or 'connection refused'}; is the server "
                "running at that address? (or let perflib start one with --start-server)") from exc
        return json_object(resp)

    async def count(self, text: str) -> int | None:
        """Tokens of `text` as a prompt, or None when the server cannot count them."""
        if self.method == "estimate":
            return None
        content = text
        if self.endpoint == "chat":
            rendered = await self._post("/apply-template", {"messages": [{"role": "user", "content": text}]})
            if not rendered or not isinstance(rendered.get("prompt"), str):
                self.method = "estimate"
                return None
            content = rendered["prompt"]
        obj = await self._post("/tokenize", {"content": content, "add_special": True, "parse_special": True})
        tokens = obj.get("tokens") if obj else None
        if not isinstance(tokens, list):
            self.method = "estimate"
            return None
        self.method = "tokenize"
        return len(tokens)


def prompt_tolerance(target: int) -> int:
    """Allowed |measured − target| tokens: 0.5% of the target, at least 2."""
    return max(2, round(0.005 * target))


def _filler(words: int, offset: int = 0) -> str:
    n = len(_FILLER_WORDS)
    return " ".join(_FILLER_WORDS[(offset + i) % n] for i in range(words))


async def fit_prompt(counter: TokenCounter, prefix: str, target: int, words_hint: int | None = None,
                     max_rounds: int = 12) -> tuple[str, int | None, str, int]:
    """Text = `prefix` + filler words, sized so its token count hits `target` within tolerance.

    Measures with the server, then adjusts the word count by the measured tokens per word
    (secant steps, then ±1 word). Returns (text, measured tokens, method, words used).
    """
    tol = prompt_tolerance(target)
    base = await counter.count(prefix)
    if base is None:  # no tokenizer: estimate from characters
        words = 0
        text = prefix
        while len(text) / ESTIMATE_CHARS_PER_TOKEN < target:
            words += max(1, int((target * ESTIMATE_CHARS_PER_TOKEN - len(text)) / 6))
            text = prefix + _filler(words)
        return text, round(len(text) / ESTIMATE_CHARS_PER_TOKEN), "estimate", words
    if base >= target:
        return prefix, base, "tokenize", 0
    words = words_hint if words_hint is not None else max(1, target - base)
    best: tuple[int, str, int, int] | None = None  # (|error|, text, tokens, words)
    rate = 1.0
    for _ in range(max_rounds):
        text = prefix + " " + _filler(words)
        measured = await counter.count(text)
        if measured is None:  # the tokenizer stopped answering: fall back to an estimate
            return text, round(len(text) / ESTIMATE_CHARS_PER_TOKEN), "estimate", words
        err = measured - target
        if best is None or abs(err) < best[0]:
            best = (abs(err), text, measured, words)
        if abs(err) <= tol:
            break
        if words > 0 and measured > base:
            rate = max(0.2, (measured - base) / words)
        step = round(-err / rate) or (-1 if err > 0 else 1)
        words = max(0, words + step)
    assert best is not None
    return best[1], best[2], "tokenize", best[3]


async def make_prompts(client: httpx.AsyncClient, base_url: str, *, endpoint: str, count: int, target: int,
                       tag: str) -> list[Prompt]:
    """`count` prompts of about `target` tokens, each starting with a unique `[tag i]` prefix.

    The distinct prefix defeats prompt-prefix caching, so every request pays its own prefill
    (`cache_prompt: false` alone is not enough on every server).
    """
    counter = TokenCounter(client, base_url, endpoint)
    prompts: list[Prompt] = []
    hint: int | None = None
    for i in range(count):
        prefix = f"[{tag} request {i}]"
        text, tokens, method, words = await fit_prompt(counter, prefix, target, hint)
        hint = words
        prompts.append(Prompt(text=text, tokens=tokens, method=method))
    return prompts

