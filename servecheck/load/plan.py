"""What a load run does: the resolved run configuration and the YAML load plans.

:class:`RunConfig` is the one object passed from ``servecheck load`` (our process) to the Locust
processes: target URL, model, prompts, arrival mode, bounds, and the secrets (the API key, the
live view's web auth). It crosses once, as one file only its owner may read (0600, named by
``SERVECHECK_LOAD_CONFIG``), which each Locust process reads once at its start; no secret goes
into a process's environment or command line. The run folder keeps a masked copy
(``load-config.json``) for the reader of a report; the 0600 file is removed when Locust ends.

A load plan (``loadtests/*.yaml``) is a named set of defaults for ``servecheck load``::

    scenario: chat
    users: 8            # closed loop ... or
    rate: 5/s           # open loop (add poisson: true)
    shape: {kind: ramp, start: 1, end: 32, over: 60s}
    duration: 30s
    max_requests: 500
    slo: ["ttft_p95<=500ms", "e2e_p99<=8s"]
    error_budget: 2%                 # share of requests that may fail (default 1%; none: off);
                                     # an error_rate SLO replaces it (analysis/budget.py)
    dataset: prompts.jsonl           # or {path: prompts.jsonl, format: sharegpt}; a relative
                                     # path is read from the plan's folder
    warmup: 10s                      # or {seconds: 10, requests: 20}: sent first, kept out
    api: messages                    # chat (default) or messages: Anthropic's /v1/messages
    images: 1x512x512,2x256x256      # or a folder of PNG/JPEG files, relative to the plan's folder
    models: {base: 3, lora-a: 1}     # split the traffic across models by weight (load/workload/mix.py)
    steady_window: auto              # or 10s:50s, or none: the part the SLOs judge
    slice_s: 5s                      # summary.json's time slices
    repeat: 3                        # three runs, confidence intervals over them
    profile: recovery:normal=5,overload=40,for=20s   # a phased load profile (load/workload/phased.py)
    agent: {turns: 8, tools: 12, fork: 0.25x3, tool_wait: exp:1}   # scenario agent's knobs

Options given on the command line override the plan's.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servecheck.client.factory import ClientSettings
from servecheck.errors import UsageError, did_you_mean
from servecheck.load.workload.cancel import CancelRule
from servecheck.load.workload.lengths import Lengths
from servecheck.load.workload.phased import Profile, parse_profile
from servecheck.redact import redact_obj

ENV_CONFIG = "SERVECHECK_LOAD_CONFIG"  # the path of the run's 0600 config file, for Locust
CONTEXT_FILE = ".locust-config.json"  # that file, in the run folder while Locust runs
PLAN_KEYS = (
    "description",
    "scenario",
    "users",
    "rate",
    "poisson",
    "arrival",  # fixed | poisson | gamma
    "burstiness",  # the gamma shape (arrival: gamma)
    "input_tokens",  # N or N:SD (load/workload/lengths.py)
    "output_tokens",
    "seed",
    "shape",
    "duration",
    "max_requests",
    "slo",
    "error_budget",
    "processes",
    "max_lag",
    "max_inflight",
    "drain",
    "extra_body",
    "honour_retry_after",
    "cancel",  # SHARE@POINT: cancel a share of the requests (load/workload/cancel.py)
    "dataset",
    "warmup",
    "api",
    "images",
    "models",  # model -> weight: traffic split across models, e.g. a base and its adapters
    "steady_window",  # auto | START:END | none (analysis/steady.py)
    "slice_s",  # the width of summary.json's time slices
    "records",  # auto | all | sample:N | none (analysis/aggregate.py)
    "profile",  # a phased load profile: burst, zigzag, microburst, step, recovery, churn
    "repeat",  # run the plan N times, with confidence intervals (workflows/repeat.py)
    "agent",  # agent sessions' knobs, a mapping or KEY=VALUE text (load/workload/agent.py)
)
WARMUP_KEYS = ("seconds", "requests")
DATASET_KEYS = ("path", "format")


@dataclass(slots=True)
class RunConfig:
    """Everything a Locust process needs to run its share of the load (JSON-serialisable)."""

    run_id: str
    target: str
    scenario: str
    base_url: str
    model: str
    records_dir: str
    mode: str = "closed"  # closed | fixed | poisson | gamma | shape | trace | profile
    users: int = 1
    rate: float | None = None
    burstiness: float | None = None  # mode "gamma": the shape of the gaps
    # --input-tokens / --output-tokens (load/workload/lengths.py), and how output is held
    input_tokens: Lengths | None = None
    output_tokens: Lengths | None = None
    output_length: str | None = None
    seed: int = 0
    duration_s: float | None = None
    max_requests: int | None = None
    workers: int = 1
    max_inflight: int = 1024
    drain_s: float = 30.0
    retry_after_max_s: float = 0.0  # > 0: closed-loop users honour Retry-After, capped at this
    cancel: CancelRule | None = None  # --cancel SHARE@POINT (load/workload/cancel.py)
    timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    probe_timeout_s: float = 10.0  # a side probe's (/tokenize), bounded by the run (load/run.py)
    api_key_header: str = "authorization"
    request_id_header: str | None = "X-Request-Id"  # None: no request id header is sent
    headers: dict[str, str] = field(default_factory=dict)  # non-secret headers only
    prompts: list[dict[str, Any]] = field(
        default_factory=list
    )  # {text, prompt_tokens, max_tokens, kind, weight}
    prompt_method: str = ""
    use_tokenize: bool = True  # measure prompt lengths with the target's /tokenize when it has one
    context_length: int | None = None  # prompt + output of every request is kept inside it
    shape: list[dict[str, Any]] = field(default_factory=list)  # stages {end, users, spawn_rate}
    extra_body: dict[str, Any] = field(default_factory=dict)
    trace: str | None = None  # mode "trace": replay this file (load/workload/trace.py)
    trace_format: str = "auto"
    trace_speed: float = 1.0
    dataset: str | None = (
        None  # prompts from this local file (load/workload/dataset.py), absolute path
    )
    dataset_format: str = "auto"
    api: str = "chat"  # chat | messages (load/generator/apis.py)
    images: str | None = None  # sizes or an absolute folder (load/workload/images.py)
    profile: Profile | None = None  # a load profile (load/workload/phased.py)
    profile_poisson: bool = False  # its arrivals Poisson (only with a profile)
    model_mix: list[tuple[str, float]] = field(default_factory=list)  # (load/workload/mix.py)
    agent: dict[str, Any] | None = None  # the agent scenario's knobs (load/workload/agent.py)
    # What each worker's streaming summary must know (analysis/aggregate.py's Rule, as a dict), and
    # which records it keeps on disk: "all", "sample:N" (a uniform sample) or "none".
    aggregate: dict[str, Any] | None = None
    records: str = "all"
    # --web / --metrics-port (load/generator/live.py): {"web": bool, "metrics": [host, port] | None,
    # "tick_s": s}; None: no live view (nothing is read a tick at a time)
    live: dict[str, Any] | None = None
    verify_tls: bool = True  # the target's verify_tls (https targets)
    # What the target runs (targets.yaml's engine) and the version it reported before the run
    # (client/version.py, as check's discovery asks it): history records it for every run kind.
    engine: str = ""
    engine_version: str | None = None
    # The dataset's sizing (load/workload/dataset.py): items sampled, and the output bound of an
    # item that names none.
    dataset_sample: int = 1000
    dataset_max_tokens: int = 128
    # Secrets: only in the 0600 file (write_private), masked in the report's copy (dump).
    api_key: str | None = None
    web_auth: str | None = None  # --web's USER:PASS

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON values, the secrets included; :meth:`from_dict` reads it back
        (a profile as its text, which parses to the same profile)."""
        data = asdict(self)  # Lengths -> {mean, sd}, CancelRule -> {share, point, value}
        poisson = data.pop("profile_poisson")
        data["profile"] = (
            None if self.profile is None else {"text": self.profile.text, "poisson": poisson}
        )
        data["model_mix"] = [[name, weight] for name, weight in self.model_mix]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """The typed config back from :meth:`to_dict`'s form."""
        values = dict(data)
        profile = values.pop("profile", None)
        values["profile"] = parse_profile(str(profile["text"])) if profile else None
        values["profile_poisson"] = bool(profile and profile.get("poisson"))
        values["cancel"] = CancelRule.from_dict(values.get("cancel"))
        for key in ("input_tokens", "output_tokens"):
            raw = values.get(key)
            values[key] = None if raw is None else Lengths(int(raw["mean"]), float(raw["sd"]))
        values["model_mix"] = [(str(n), float(w)) for n, w in values.get("model_mix") or ()]
        return cls(**values)

    def dump(self, path: str | os.PathLike[str]) -> Path:
        """Write the report's copy, every secret masked (header values, URL credentials) and the
        API key and web auth left out: the file stays in the run folder."""
        data = self.to_dict()
        data["api_key"] = data["web_auth"] = None
        p = Path(path)
        p.write_text(json.dumps(redact_obj(data), indent=1), encoding="utf-8")
        return p

    def write_private(self, path: str | os.PathLike[str]) -> Path:
        """Write the whole config, secrets included, readable by its owner only (0600): the one
        thing a Locust process is given (its path in ``SERVECHECK_LOAD_CONFIG``)."""
        p = Path(path)
        with contextlib.suppress(FileNotFoundError):
            p.unlink()  # a stale one may have wider permissions: O_CREAT alone would keep them
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(self.to_dict(), out)
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunConfig:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def auth_headers(self) -> dict[str, str]:
        """The API key as the target sends it (``api_key_header``); empty without a key."""
        key = self.api_key
        if not key:
            return {}
        if self.api_key_header == "authorization":
            return {"Authorization": "Bearer " + key}
        return {self.api_key_header: key}

    def client_settings(self) -> ClientSettings:
        """What every request of the run shares: base URL, headers and auth, timeouts, TLS
        (client/factory.py); the Locust process's readers take it from here."""
        return ClientSettings(
            base_url=self.base_url,
            headers={**self.headers, **self.auth_headers()},
            timeout_s=self.timeout_s,
            connect_timeout_s=self.connect_timeout_s,
            verify_tls=self.verify_tls,
        )


@dataclass(slots=True)
class PlainInputs:
    """What a Locust process is told beyond Locust's own options and the run's config file.

    Plain ``locust -f`` (no ``servecheck load``) has no config file: the target, the model and
    the rest come from these. ``servecheck/scenarios/_options.py`` registers each as a Locust
    option ``--servecheck-<name>`` with its environment variable (Locust's own mechanism) and
    checks its value; this library only reads the parsed options, through :meth:`of`. The
    dataset's sizing is read this way under ``servecheck load`` too (a scenario knob, as the
    multi-turn scenario's turns are).
    """

    target: str | None = None
    targets_file: str = "targets.yaml"
    model: str | None = None
    records_dir: str | None = None
    max_requests: int | None = None
    trace: str | None = None
    trace_format: str = "auto"
    trace_speed: float = 1.0
    dataset: str | None = None
    dataset_format: str = "auto"
    dataset_sample: int = 1000
    dataset_max_tokens: int = 128
    api: str | None = None
    images: str | None = None

    @classmethod
    def of(cls, parsed: Any) -> PlainInputs:
        """From Locust's parsed options (``servecheck_<name>``); an absent or empty one keeps
        its default (a locustfile that does not import the options module has none)."""
        out = cls()
        for name in cls.__slots__:
            value = getattr(parsed, f"servecheck_{name}", None)
            if value is not None and value != "":
                setattr(out, name, value)
        return out


@dataclass(slots=True)
class LoadPlan:
    """A parsed ``loadtests/*.yaml`` file (every key optional)."""

    path: str
    values: dict[str, Any]


def load_plan(path: str | os.PathLike[str]) -> LoadPlan:
    """Read a load plan; unknown keys are a :class:`UsageError` with a did-you-mean."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"load plan {str(p)!r} not found")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{p}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{p}: a load plan is a mapping of keys ({', '.join(PLAN_KEYS)})")
    for key in data:
        if key not in PLAN_KEYS:
            raise UsageError(
                f"{p}: unknown key {key!r}{did_you_mean(str(key), PLAN_KEYS)}; keys: {', '.join(PLAN_KEYS)}"
            )
    if "slo" in data and isinstance(data["slo"], str):
        data["slo"] = [data["slo"]]
    if "slo" in data:  # a bad SLO names the plan file, before any target is probed
        from servecheck.analysis.slo import parse_slos

        try:
            parse_slos(data["slo"] or [], "cli")
        except UsageError as exc:
            raise UsageError(f"{p}: slo: {exc}") from None
    if "error_budget" in data:
        data["error_budget"] = _plan_error_budget(p, data["error_budget"])
    if "warmup" in data:
        data["warmup"] = _plan_warmup(p, data["warmup"])
    if "dataset" in data:
        data["dataset"] = _plan_dataset(p, data["dataset"])
    if "images" in data:
        data["images"] = _plan_images(p, data["images"])
    if "profile" in data:  # checked here, so a bad one names the plan file
        from servecheck.load.workload.phased import parse_profile

        try:
            parse_profile(str(data["profile"]))
        except UsageError as exc:
            raise UsageError(f"{p}: profile: {exc}") from None
    if "agent" in data:
        data["agent"] = _plan_agent(p, data["agent"])
    if "models" in data:
        from servecheck.load.workload.mix import parse_model_mix

        data["models"] = parse_model_mix(data["models"], f"{p}: models")
    return LoadPlan(str(p), data)


def _plan_agent(p: Path, raw: Any) -> dict[str, Any]:
    """``agent: {turns: 8, fork: 0.25x3}`` (or its KEY=VALUE text), checked as the option is;
    a relative ``source`` is read from the plan's folder."""
    from servecheck.errors import SpecError
    from servecheck.load.workload.agent import parse_agent

    if not isinstance(raw, (dict, str)):
        raise UsageError(f"{p}: agent: a mapping of its keys (turns, tools, fork ...)")
    try:
        shape = parse_agent(raw)
    except SpecError as exc:
        raise UsageError(f"{p}: {exc.render({'agent': 'agent:'})}") from None
    out = shape.to_dict()
    if shape.source and not Path(os.path.expanduser(shape.source)).is_absolute():
        out["source"] = str(p.resolve().parent / shape.source)
    return out


def _plan_images(p: Path, raw: Any) -> str:
    """``images: 512x512`` or a folder (a relative one is the plan's), checked as ``--images``."""
    from servecheck.load.workload.images import check_images

    if not isinstance(raw, str) or not raw.strip():
        raise UsageError(f"{p}: images: sizes such as 1x512x512,2x256x256, or a folder")
    text = raw.strip()
    folder = Path(os.path.expanduser(text))
    if not folder.is_absolute() and (p.resolve().parent / folder).is_dir():
        text = str(p.resolve().parent / folder)
    try:
        return check_images(text) or text
    except UsageError as exc:
        raise UsageError(f"{p}: {exc}") from None


def _known_keys(p: Path, section: str, raw: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in raw:
        if key not in keys:
            raise UsageError(
                f"{p}: {section}: unknown key {key!r}{did_you_mean(str(key), keys)}; "
                f"keys: {', '.join(keys)}"
            )


def _plan_error_budget(p: Path, raw: Any) -> str:
    """``error_budget: 2%`` (or ``none``) -> its text, checked as ``--error-budget`` is. YAML
    reads ``off`` as false and an empty value as null: both mean no budget."""
    from servecheck.analysis.budget import parse_error_budget
    from servecheck.errors import SpecError

    text = "none" if raw is None or raw is False else str(raw)
    try:
        parse_error_budget(text)
    except SpecError as exc:  # a plan key, not an option: name the file and the key as written
        raise UsageError(f"{p}: {exc}") from None
    return text


def _plan_warmup(p: Path, raw: Any) -> dict[str, Any]:
    """``warmup: 10s`` or ``{seconds: 10s, requests: 20}`` -> ``{"seconds": s, "requests": n}``."""
    from servecheck.load.workload.schedule import parse_duration

    if isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
        raw = {"seconds": raw}
    if not isinstance(raw, dict) or not raw:
        raise UsageError(f"{p}: warmup: a duration (10s) or {{seconds: 10s, requests: 20}}")
    _known_keys(p, "warmup", raw, WARMUP_KEYS)
    out: dict[str, Any] = {"seconds": None, "requests": None}
    if raw.get("seconds") is not None:
        sec = raw["seconds"]
        try:
            out["seconds"] = parse_duration(f"{sec}s" if isinstance(sec, (int, float)) else sec)
        except UsageError as exc:
            raise UsageError(f"{p}: warmup.seconds: {exc}") from None
        if out["seconds"] < 0:
            raise UsageError(f"{p}: warmup.seconds must be >= 0")
    n = raw.get("requests")
    if n is not None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise UsageError(f"{p}: warmup.requests: a whole number >= 0, not {n!r}")
        out["requests"] = n
    return out


def _plan_dataset(p: Path, raw: Any) -> dict[str, Any]:
    """``dataset: FILE`` or ``{path: FILE, format: sharegpt}``; a relative path is the plan's."""
    from servecheck.load.workload.dataset import FORMATS

    if isinstance(raw, str):
        raw = {"path": raw}
    if not isinstance(raw, dict) or not isinstance(raw.get("path"), str) or not raw["path"]:
        raise UsageError(f"{p}: dataset: a file path, or {{path: FILE, format: auto}}")
    _known_keys(p, "dataset", raw, DATASET_KEYS)
    fmt = raw.get("format", "auto")
    if fmt not in FORMATS:
        raise UsageError(
            f"{p}: dataset.format {fmt!r}{did_you_mean(str(fmt), FORMATS)}; one of {', '.join(FORMATS)}"
        )
    path = Path(os.path.expanduser(raw["path"]))
    if not path.is_absolute():
        path = p.resolve().parent / path
    return {"path": str(path), "format": fmt}
