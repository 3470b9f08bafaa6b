"""Prompt sizing: the target token count hit with a server's tokenizer, an estimate without one."""

from __future__ import annotations

import asyncio

import pytest

from perflib import load
from perflib.load import http_client
from perflib.load.prompts import ESTIMATE_CHARS_PER_TOKEN

# test_sweep_server.py, where measured counts are checked against usage.prompt_tokens)


class _WordCounter:
    """Counts like a tokenizer that gives each word 1 token and each digit run 1 more, plus BOS."""

    method = "tokenize"

    async def count(self, text: str) -> int:
        return 1 + sum(1 + sum(ch.isdigit() for ch in word) // 3 for word in text.split())


@pytest.mark.parametrize("target", [40, 333, 2048])
def test_fit_prompt_hits_target_within_tolerance(target):
    text, tokens, method, _ = asyncio.run(load.fit_prompt(_WordCounter(), "[abc request 12]", target))
    assert method == "tokenize"
    assert tokens == asyncio.run(_WordCounter().count(text))
    assert abs(tokens - target) <= load.prompt_tolerance(target)


def test_token_counter_against_a_server_without_tokenize_falls_back_to_estimate():
    async def main() -> list[load.Prompt]:
        server = await asyncio.start_server(_not_found, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, http_client(5.0) as client:
            return await load.make_prompts(client, f"http://127.0.0.1:{port}", endpoint="completions",
                                           count=2, target=100, tag="t")

    prompts = asyncio.run(main())
    assert [p.method for p in prompts] == ["estimate", "estimate"]
    assert prompts[0].text != prompts[1].text and prompts[0].text.startswith("[t request 0]")
    assert all(abs(len(p.text) / ESTIMATE_CHARS_PER_TOKEN - 100) < 10 for p in prompts)


async def _not_found(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    if length:
        await reader.readexactly(length)
    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot found")
    await writer.drain()
    writer.close()
