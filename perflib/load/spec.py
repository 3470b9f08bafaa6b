"""What one level needs, as one typed record that goes through JSON and back.

`LevelSpec` holds everything `perflib.sweep.run_level` needs to measure one run into its folder: the
server's URL, batch, context, decode tokens and repeat, the folder, how the requests are sent, their
timeouts, the contention thresholds, the campaign's labels and what perflib knows of a server it
started (`ServerInfo`). It replaces the argument chains that ran from the campaign runner through the
notebook to the level, and crosses the notebook boundary as one parameter: `collect.ipynb`'s `level`,
a JSON object (`LevelSpec.from_json(spec.to_json()) == spec`). A request's own record is
`perflib.load.request.RequestSpec`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol

from perflib.errors import InputError
from perflib.load.contention import CPU_THRESHOLD, PSI_THRESHOLD, WAIT_THRESHOLD
from perflib.load.request import DEFAULT_IDLE_TIMEOUT_S, ENDPOINTS, RequestSpec, request_timeout_for
from perflib.rundir import run_name
from perflib.safeinput import describe, json_parameter, value_problem

GAUGE_INTERVAL_S = 0.5
"""Gauge sampling period during a level."""


class StartedServer(Protocol):
    """A server perflib started, as `perflib.server.ServerHandle` is one (named by its shape: the server
    package imports this one)."""

    @property
    def flags(self) -> list[str]: ...
    @property
    def log_path(self) -> Path: ...
    @property
    def pid(self) -> int: ...
    def identity(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ServerInfo:
    """What perflib knows of a server it started beyond what the server answers over HTTP: the manifest
    records its flags, version, binary and model file, the run folder gets its log's slice written during
    the level, and its pid is not counted as contention."""

    flags: tuple[str, ...] = ()
    """The command line after the program."""
    log_path: str | None = None
    version: str | None = None
    identity: Mapping[str, Any] = field(default_factory=dict)
    """`perflib.server.ServerHandle.identity`: kind, commit, model, binary, binary_sha256 (flags and version
    are the fields above)."""
    pid: int | None = None

    @classmethod
    def of(cls, handle: StartedServer) -> ServerInfo:
        """What a level records of a server perflib started, read once per server."""
        try:
            identity = dict(handle.identity())
        except Exception:  # noqa: BLE001 - the identity is a nicety; the level does not depend on it
            identity = {}
        version = identity.pop("version", None)
        identity.pop("flags", None)
        return cls(tuple(handle.flags), str(handle.log_path), version if isinstance(version, str) else None,
                   identity, handle.pid)

    def started(self) -> dict[str, Any]:
        """What the manifest's `server` gets from this beyond the server's own answers: the preset, the
        binary and its SHA-256, the commit its version names, the model file."""
        ident = self.identity
        out = {k: ident[k] for k in ("binary", "binary_sha256", "commit", "model_file") if ident.get(k) is not None}
        if ident.get("kind"):
            out["preset"] = ident["kind"]
        if ident.get("model"):
            out["model_file"] = ident["model"]
        return out


FIELDS: dict[str, str] = {
    "base_url": "str", "batch": "positive", "context": "positive", "decode_tokens": "positive", "repeat": "positive",
    "out_dir": "str", "endpoint": "str", "dialect": "str", "model": "str?", "ignore_eos": "bool",
    "extra_body": "dict?", "timeout": "number?", "idle_timeout": "number?", "workers": "positive",
    "contention_threshold": "number?", "wait_threshold": "number?", "psi_threshold": "number?",
    "gauge_interval": "number", "scrape_metrics": "bool", "campaign": "str?", "arm": "str?", "backend": "str?",
    "server": "dict?",
}
"""Each `LevelSpec` field's kind in JSON (`perflib.safeinput.VALUE_KINDS`)."""

SERVER_FIELDS: dict[str, str] = {"flags": "list[str]", "log_path": "str?", "version": "str?", "identity": "dict",
                                 "pid": "int?"}


@dataclass(frozen=True)
class LevelSpec:
    """One level: `batch` requests of `context` prompt tokens and `decode_tokens` streamed tokens each,
    repeat `repeat`, measured against `base_url` into `<out_dir>/b<batch>_c<context>_r<repeat>/`."""

    base_url: str
    batch: int
    context: int
    decode_tokens: int
    repeat: int
    out_dir: Path = Path(".")
    """The folder that holds the run folder (a campaign's `<data>/raw/<campaign>/<arm>/<backend>/`)."""
    endpoint: str = "completions"
    dialect: str = "auto"
    """How `/metrics` is read (`perflib.metrics`): `auto`, or a server's dialect."""
    model: str | None = None
    """The model name the requests send; None: the one the server names."""
    ignore_eos: bool = True
    extra_body: Mapping[str, Any] | None = None
    """Fields added to each request body; None: the server's own (llama.cpp: `cache_prompt: false`)."""
    timeout: float | None = None
    """Seconds one request may take in all; None: `perflib.load.request_timeout_for(decode_tokens)`."""
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S
    """Seconds without a byte once a stream has begun before its request fails (None: no limit)."""
    workers: int = 1
    """Processes the requests are sent from (`perflib.load.workers`); 1: this process."""
    contention_threshold: float | None = CPU_THRESHOLD
    """Share of the CPUs other processes may use during the level (`perflib.load.contention`); None: not
    sampled at all."""
    wait_threshold: float | None = WAIT_THRESHOLD
    """Run-queue wait per CPU second of the server's and client's threads; None: does not decide."""
    psi_threshold: float | None = PSI_THRESHOLD
    """PSI stall share of the level; None: does not decide."""
    gauge_interval: float = GAUGE_INTERVAL_S
    scrape_metrics: bool = True
    campaign: str | None = None
    arm: str | None = None
    backend: str | None = None
    server: ServerInfo | None = None
    """The server perflib started, where it did; None: a server it only reaches by URL."""

    def __post_init__(self) -> None:
        if not isinstance(self.out_dir, Path):
            object.__setattr__(self, "out_dir", Path(self.out_dir))
        if self.endpoint not in ENDPOINTS:
            raise InputError("level", "endpoint", f"one of {', '.join(ENDPOINTS)}", describe(self.endpoint))

    @property
    def name(self) -> str:
        """The run folder's name, `b<batch>_c<context>_r<repeat>`."""
        return run_name(self.batch, self.context, self.repeat)

    @property
    def run_dir(self) -> Path:
        return self.out_dir / self.name

    @property
    def request_timeout(self) -> float:
        """The timeout of each request: `timeout`, else the default for `decode_tokens`."""
        return self.timeout if self.timeout is not None else request_timeout_for(self.decode_tokens)

    @property
    def contention(self) -> bool:
        """Whether the level samples what else uses the CPUs."""
        return self.contention_threshold is not None

    def request(self, request_id: str, prompt: str, max_tokens: int, prompt_tokens: int | None = None,
                prompt_tokens_method: str = "estimate") -> RequestSpec:
        """One request of this level (the warm-up's or one of the wave's)."""
        return RequestSpec(self.base_url, prompt, max_tokens, request_id, self.batch, self.context, self.repeat,
                           endpoint=self.endpoint, prompt_tokens=prompt_tokens,
                           prompt_tokens_method=prompt_tokens_method, model=self.model, ignore_eos=self.ignore_eos,
                           extra_body=dict(self.extra_body) if self.extra_body is not None else None,
                           timeout=self.request_timeout, idle_timeout=self.idle_timeout)

    def at(self, batch: int, context: int, repeat: int) -> LevelSpec:
        """This spec for another point of a matrix."""
        return replace(self, batch=batch, context=context, repeat=repeat)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: the folder as a string, the server as an object."""
        out = asdict(self)
        out["out_dir"] = str(self.out_dir)
        if self.server is not None:
            out["server"] = {**asdict(self.server), "flags": list(self.server.flags),
                             "identity": dict(self.server.identity)}
        if self.extra_body is not None:
            out["extra_body"] = dict(self.extra_body)
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, value: str | Mapping[str, Any] | LevelSpec, where: str = "level") -> LevelSpec:
        """A spec from its JSON text or object (as `to_dict` gives it; missing fields take their
        defaults); an `InputError` names the field that is unknown, missing or not of its kind."""
        if isinstance(value, LevelSpec):
            return value
        value = json_parameter(value, where, "level spec", sorted(f.name for f in fields(cls)))
        missing = [k for k in ("base_url", "batch", "context", "decode_tokens", "repeat") if k not in value]
        if missing:
            raise InputError(where, missing[0], "a value (base_url, batch, context, decode_tokens and repeat are "
                             "needed)", "none")
        _check(value, FIELDS, where)
        data = dict(value)
        server = data.get("server")
        if server is not None:
            unknown = sorted(set(server) - set(SERVER_FIELDS))
            if unknown:
                raise InputError(where, f"server.{unknown[0]}", f"one of {', '.join(SERVER_FIELDS)}", "an unknown field")
            _check(server, SERVER_FIELDS, f"{where}.server")
            data["server"] = ServerInfo(**{**server, "flags": tuple(server.get("flags") or ())})
        return cls(**data)


def _check(obj: Mapping[str, Any], kinds: Mapping[str, str], where: str) -> None:
    for name, kind in kinds.items():
        if name in obj:
            expected = value_problem(obj[name], kind)
            if expected:
                raise InputError(where, name, expected, describe(obj[name]))
