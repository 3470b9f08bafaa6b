"""The README's JupyterLab steps, followed in a real JupyterLab in headless Chromium; screenshots a figure.

    .venv/bin/python scripts/jupyterlab_screenshot.py [--out build/jupyterlab-figure.png | --docs]

What a user does, checked: `jupyter lab` starts on a free localhost port with a token, with the kernel
`make install` registers ("perflib (venv)", this interpreter); a new notebook in `notebooks/` holds the
README's snippet (the ```python block under "Exploring in JupyterLab", one cell, as pasted: it opens a
committed campaign's real data by a path relative to the project); Debian's Chromium (`apt-get install
chromium`; no browser download) opens it and Run All runs it. The script waits until the cell ran, then
checks that no cell raised and that every figure the snippet asks for (one per `plot_*` call) is shown as
an image, scrolls to the first one and saves the screenshot: to build/ (untracked) by default, to
docs/jupyterlab-figure.png with `--docs`. It exits non-zero, saying why, when a cell raises or a figure is
missing. Chromium is driven through its DevTools protocol (websocket-client, which jupyter_server already
needs). The lab's settings (autosave off), workspaces, runtime files, kernel spec and the browser profile
live in a temporary folder; the snippet's notebook is removed afterwards.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
README_SECTION = "## Exploring in JupyterLab"
KERNEL_NAME, KERNEL_DISPLAY = "perflib", "perflib (venv)"  # what `make install` registers
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--remote-debugging-port=0"]
LAB_SETTINGS = {  # plugin -> settings, written to a fresh JUPYTERLAB_SETTINGS_DIR
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},  # the run must not save outputs
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},  # every cell in the DOM
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Any, timeout: float, every: float = 0.5) -> Any:
    """`check()` until it returns something true; a RuntimeError naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def _get(url: str) -> bytes | None:
    with contextlib.suppress(OSError):
        with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310 (a localhost URL we made)
            return reply.read()
    return None


def _stop(proc: subprocess.Popen) -> None:
    """Stop a process group this script started (SIGTERM, then SIGKILL after 10 s)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@contextlib.contextmanager
def jupyter_lab(tmp: Path) -> Iterator[str]:
    """`jupyter lab` on the checkout, on a free localhost port with a token; yields its base URL with the
    token as query (`...?token=`). Its settings, workspaces and runtime files live under `tmp`."""
    settings = tmp / "lab-settings"
    for plugin, values in LAB_SETTINGS.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    spec = tmp / "data" / "kernels" / KERNEL_NAME  # as `make install` registers it, for this interpreter
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": KERNEL_DISPLAY, "language": "python", "metadata": {"debugger": True}}))
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "ws"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "JUPYTER_DATA_DIR": str(tmp / "data"),
           "PYTHONPATH": str(REPO)}
    log = (tmp / "lab.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
                             f"--port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
                             f"--ServerApp.root_dir={REPO}", "--LabApp.expose_app_in_browser=True",
                             *(["--allow-root"] if os.geteuid() == 0 else []),  # CI and containers run as root
                             "--LabApp.check_for_updates_class="
                             "jupyterlab.handlers.announcements.NeverCheckForUpdate"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"

    def answers() -> bytes | None:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}")
        return _get(f"{base}/api/status?token={token}")

    try:
        wait_for("jupyter lab to answer", answers, 90)
        yield f"{base}/lab/tree/{{path}}?token={token}"
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}; jupyter lab log:\n{(tmp / 'lab.log').read_text()[-3000:]}") from None
    finally:
        _stop(proc)
        log.close()


class DevTools:
    """The few DevTools protocol calls this script needs, on one page target."""

    def __init__(self, websocket_url: str):
        import websocket

        self.ws = websocket.create_connection(websocket_url, timeout=60, suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict:
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def close(self) -> None:
        self.ws.close()


@contextlib.contextmanager
def chromium(tmp: Path, binary: str, width: int, height: int) -> Iterator[DevTools]:
    """Headless Chromium with a fresh profile under `tmp`, its page driven through `DevTools`."""
    profile = tmp / "chromium-profile"
    proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=(tmp / "chromium.log").open("w"),
                            start_new_session=True)
    try:
        active = profile / "DevToolsActivePort"
        wait_for("Chromium's DevTools port", lambda: proc.poll() is None and active.is_file()
                 and active.read_text().strip(), 30)
        port = active.read_text().split()[0]
        targets = wait_for("Chromium's page", lambda: [t for t in json.loads(_get(f"http://127.0.0.1:{port}/json/list")
                                                                               or b"[]") if t["type"] == "page"], 30)
        tools = DevTools(targets[0]["webSocketDebuggerUrl"])
        tools.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        try:
            yield tools
        finally:
            tools.close()
    finally:
        _stop(proc)


PANEL = "[...window.jupyterapp.shell.widgets('main')].find(w => w.sessionContext)"
KERNEL_IDLE = f"""(() => {{
  const panel = window.jupyterapp && {PANEL};
  const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
  return !!kernel && kernel.status === 'idle';
}})()"""
MENU = "[...document.querySelectorAll('.lm-MenuBar-itemLabel')].find(e => e.textContent.trim() === {!r})"
MENU_ITEM = "[...document.querySelectorAll('.lm-Menu .lm-Menu-itemLabel')].find(e => e.textContent.trim() === {!r})"
FIRST_CELL = "document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')"
STATE = f"""(() => {{
  const panel = window.jupyterapp && {PANEL};
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  if (!nb) return null;
  const prompts = [...nb.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim());
  return {{cells: prompts.length, running: prompts.filter(p => p.includes('*')).length,
          unrun: prompts.filter(p => p === '[ ]:' || p === '').length,
          kernel: panel ? panel.sessionContext.kernelDisplayName : null,
          errors: nb.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').length,
          images: [...nb.querySelectorAll('.jp-OutputArea-output img')].filter(i => i.complete && i.naturalWidth > 0)
                  .map(i => [i.naturalWidth, i.naturalHeight])}};
}})()"""
SHOW_FIRST_FIGURE = """(() => {
  const img = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output img');
  img.scrollIntoView({block: 'center'});
  const r = img.getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: innerWidth, height: innerHeight};
})()"""


def click(tools: DevTools, element: str, what: str, timeout: float = 30) -> None:
    """A real mouse click (DevTools input events) at the centre of the element a JavaScript expression finds."""
    centre = wait_for(what, lambda: tools.js(f"""(() => {{
      const e = {element};
      if (!e) return null;
      const r = e.getBoundingClientRect();
      return r.width && r.height ? [r.left + r.width / 2, r.top + r.height / 2] : null;
    }})()"""), timeout)
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        tools.call("Input.dispatchMouseEvent", type=kind, x=centre[0], y=centre[1], button="left", clickCount=1)


def run_notebook(tools: DevTools, url: str, timeout: float) -> dict:
    """Open the notebook, wait for its kernel, click Run > Run All Cells as a user does, and wait until every
    cell ran; the final state."""
    tools.call("Emulation.setFocusEmulationEnabled", enabled=True)  # a headless page has no window focus
    tools.call("Page.navigate", url=url)
    wait_for("the notebook's cells", lambda: (tools.js(STATE) or {}).get("cells"), timeout)
    wait_for("the notebook's kernel to be idle", lambda: tools.js(KERNEL_IDLE), timeout)
    click(tools, FIRST_CELL, "the notebook's first cell")  # the notebook becomes the current one
    click(tools, MENU.format("Run"), "the Run menu")
    click(tools, MENU_ITEM.format("Run All Cells"), "Run All Cells in the Run menu")

    def finished() -> dict | None:
        state = tools.js(STATE) or {}
        done = state.get("cells") and not state["running"] and not state["unrun"] and tools.js(KERNEL_IDLE)
        return state if done else None

    wait_for("every cell to run", finished, timeout)
    time.sleep(1.0)  # the last images decode
    return tools.js(STATE)


def readme_snippet(readme: Path = REPO / "README.md") -> str:
    """The first ```python block under the README's "Exploring in JupyterLab" heading: what a user pastes."""
    text = readme.read_text(encoding="utf-8")
    start = text.find(README_SECTION)
    found = re.search(r"^```python\n(.*?)^```", text[start:], re.S | re.M) if start >= 0 else None
    if found is None:
        raise RuntimeError(f"{readme}: no ```python block under {README_SECTION!r}")
    return found.group(1)


def expected_figures(code: str) -> int:
    """One figure per `plot_*` call of the snippet."""
    return len(re.findall(r"\.plot_\w+\(", code))


def snippet_notebook(code: str) -> dict:
    """A new notebook with the snippet as its one cell, on the kernel `make install` registers."""
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": KERNEL_NAME, "display_name": KERNEL_DISPLAY, "language": "python"},
                         "language_info": {"name": "python"}},
            "cells": [{"cell_type": "code", "id": "readme-snippet", "metadata": {}, "execution_count": None,
                       "outputs": [], "source": code}]}


def screenshot(out: Path, binary: str, width: int, height: int, timeout: float) -> dict:
    """Follow the README's JupyterLab steps in Chromium, check every figure shows, save a screenshot of the first."""
    code = readme_snippet()
    wanted = expected_figures(code)
    notebook = REPO / "notebooks" / f"readme-check-{os.getpid()}.ipynb"  # a new notebook where a user makes one
    notebook.write_text(json.dumps(snippet_notebook(code), indent=1))
    with tempfile.TemporaryDirectory(prefix="perflib-lab-") as name:
        tmp = Path(name)
        try:
            with jupyter_lab(tmp) as url, chromium(tmp, binary, width, height) as tools:
                state = run_notebook(tools, url.format(path=notebook.relative_to(REPO).as_posix()), timeout)
                if state["errors"]:
                    raise RuntimeError(f"{state['errors']} output(s) on stderr or an error: run the README's snippet "
                                       "from notebooks/ to see it")
                if state["kernel"] != KERNEL_DISPLAY:
                    raise RuntimeError(f"the notebook ran on kernel {state['kernel']!r}, not {KERNEL_DISPLAY!r}")
                if len(state["images"]) != wanted:
                    raise RuntimeError(f"the README's snippet asks for {wanted} figure(s) (its plot_* calls) and the "
                                       f"notebook shows {len(state['images'])}")
                box = tools.js(SHOW_FIRST_FIGURE)
                time.sleep(0.5)
                if box["top"] < 0 or box["bottom"] > box["height"] or box["right"] > box["width"]:
                    raise RuntimeError(f"the first figure is not wholly in view: {box}")
                png = base64.b64decode(tools.call("Page.captureScreenshot", format="png")["data"])
        finally:
            notebook.unlink(missing_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(png)
    return {"out": str(out), "figures": len(state["images"]), "expected": wanted, "kernel": state["kernel"],
            "figure_box": box}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, default=REPO / "build" / "jupyterlab-figure.png",
                       help="where the screenshot goes (default: build/jupyterlab-figure.png, untracked)")
    where.add_argument("--docs", action="store_true", help="write docs/jupyterlab-figure.png, the README's picture")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="Debian's chromium (apt-get install chromium)")
    parser.add_argument("--size", default="1400x1000", help="viewport WIDTHxHEIGHT in pixels")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for each wait")
    args = parser.parse_args(argv)
    if not Path(args.chromium).is_file():
        print(f"error: no Chromium at {args.chromium}; `apt-get install -y chromium`", file=sys.stderr)
        return 2
    width, height = (int(v) for v in args.size.lower().split("x"))
    out = REPO / "docs" / "jupyterlab-figure.png" if args.docs else args.out
    try:
        result = screenshot(out, args.chromium, width, height, args.timeout)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
