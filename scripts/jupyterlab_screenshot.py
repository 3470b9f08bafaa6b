"""Open a notebook in a real JupyterLab in headless Chromium, run all its cells, and screenshot a figure.

    .venv/bin/python scripts/jupyterlab_screenshot.py [--notebook notebooks/analyze.ipynb]
                                                      [--out docs/jupyterlab-figure.png]

What a user does, checked: `jupyter lab` starts on a free localhost port with a token, Debian's
Chromium (`apt-get install chromium`; no browser download) opens the notebook, Run All runs it in the
kernel of this interpreter, and the script waits until the notebook's figures are shown as images
before it scrolls to the first one and saves the screenshot. It exits non-zero, saying why, when a
cell raises or no figure appears. Chromium is driven through its DevTools protocol (websocket-client,
which jupyter_server already needs). Nothing in the checkout is written but the screenshot: the
lab's settings (autosave off), workspaces, runtime files and the browser profile live in a temporary
folder, and the notebook's bytes are checked afterwards.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import json
import os
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
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "ws"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "JUPYTER_DATA_DIR": str(tmp / "data"),
           "PYTHONPATH": str(REPO),
           # this interpreter's own `python3` kernel comes first, whatever the user has registered
           "JUPYTER_PATH": os.pathsep.join([str(Path(sys.prefix) / "share" / "jupyter"),
                                            os.environ.get("JUPYTER_PATH", "")]).rstrip(os.pathsep)}
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
STATE = """(() => {
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  if (!nb) return null;
  const prompts = [...nb.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim());
  return {cells: prompts.length, running: prompts.filter(p => p.includes('*')).length,
          unrun: prompts.filter(p => p === '[ ]:' || p === '').length,
          errors: nb.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').length,
          images: [...nb.querySelectorAll('.jp-OutputArea-output img')].filter(i => i.complete && i.naturalWidth > 0)
                  .map(i => [i.naturalWidth, i.naturalHeight])};
})()"""
SHOW_FIRST_FIGURE = """(() => {
  const img = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output img');
  const cell = img.closest('.jp-Cell');
  const heading = cell.previousElementSibling || cell;
  heading.scrollIntoView({block: 'start'});
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


def screenshot(notebook: Path, out: Path, binary: str, width: int, height: int, timeout: float) -> dict:
    """Run `notebook` in JupyterLab in Chromium and save a screenshot of its first figure to `out`."""
    before = notebook.read_bytes()
    with tempfile.TemporaryDirectory(prefix="perflib-lab-") as name:
        tmp = Path(name)
        try:
            with jupyter_lab(tmp) as url, chromium(tmp, binary, width, height) as tools:
                state = run_notebook(tools, url.format(path=notebook.resolve().relative_to(REPO).as_posix()), timeout)
                if state["errors"]:
                    raise RuntimeError(f"{state['errors']} cell(s) wrote to stderr or raised: see the notebook")
                if not state["images"]:
                    raise RuntimeError("the notebook ran but shows no figure")
                box = tools.js(SHOW_FIRST_FIGURE)
                time.sleep(0.5)
                if box["top"] < 0 or box["bottom"] > box["height"] or box["right"] > box["width"]:
                    raise RuntimeError(f"the first figure is not wholly in view: {box}")
                png = base64.b64decode(tools.call("Page.captureScreenshot", format="png")["data"])
        finally:
            if notebook.read_bytes() != before:  # JupyterLab saved it after all: put the committed bytes back
                notebook.write_bytes(before)
                print(f"warning: {notebook} was saved by JupyterLab; restored", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(png)
    return {"out": str(out), "figures": len(state["images"]), "cells": state["cells"], "figure_box": box}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=REPO / "notebooks" / "analyze.ipynb")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "jupyterlab-figure.png")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="Debian's chromium (apt-get install chromium)")
    parser.add_argument("--size", default="1400x1000", help="viewport WIDTHxHEIGHT in pixels")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for each wait")
    args = parser.parse_args(argv)
    if not Path(args.chromium).is_file():
        print(f"error: no Chromium at {args.chromium}; `apt-get install -y chromium`", file=sys.stderr)
        return 2
    width, height = (int(v) for v in args.size.lower().split("x"))
    try:
        result = screenshot(args.notebook, args.out, args.chromium, width, height, args.timeout)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
