"""Prompts from the user's own dataset file: JSONL or ShareGPT, single- or multi-turn.

Nothing is downloaded: ``--dataset FILE`` (``servecheck load``, ``capacity``, ``accept``; a load
plan's ``dataset:``; for plain ``locust -f`` its option, servecheck/scenarios/_options.py) names a local file. Formats (``--dataset-format``: ``auto`` detects them per
record; a named one makes every record of another shape an error at its line):

* ShareGPT: ``{"conversations": [{"from": "system"|"human"|"gpt", "value": "..."}, ...]}``, as a
  JSON array or one object per line;
* OpenAI chat: ``{"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}``;
* plain: ``{"prompt": "..."}`` (or ``"text"``), optionally ``"max_tokens"`` / ``"output_tokens"``.

A record becomes a :class:`DatasetItem`: an optional system prompt, its user turns in order and,
where the file has them, the reference answers' lengths (used as ``max_tokens``, as the usual
ShareGPT benchmarks do; else the run's ``dataset_max_tokens``, 128). The file's own assistant
turns are never sent: in multi-turn use the history is the server's real replies.

Per Locust process the items are shuffled with the run's seed and up to the run's
``dataset_sample`` (1000; both knobs: servecheck/scenarios/_options.py) are kept; their first turn is sized with the target's
``/tokenize`` where it has one (else the 4-characters-per-token estimate), and items that cannot
fit the target's context are left out (counted). A bad file is a usage error before any load
(:func:`check_dataset`, called by the load run, capacity and accept before any traffic), naming
the file and line. The path travels in the run configuration: a distributed worker reads the
file at the path given to its own ``--dataset`` (the same file must be on every worker's host).
Each worker's done message carries :func:`dataset_fingerprint` of the file it read; the master
compares it with its own, so a worker started without ``--dataset`` (which would send synthetic
prompts) or with another file makes the run inconclusive, naming the worker.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.errors import SpecError, UsageError, did_you_mean
from servecheck.load.workload.planned import CHAT_TEMPLATE_TOKENS, PlannedRequest
from servecheck.load.workload.prompts import APPROX_METHOD, Counter, Prompt, approx_tokens

MAX_RECORDS = 2_000_000
FORMATS = ("auto", "sharegpt", "openai", "prompt")
# The key each named format's records carry (auto: any of them, per record).
_FORMAT_KEY = {"sharegpt": "conversations", "openai": "messages", "prompt": "prompt"}
_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "system": "system",
}


def dataset_fingerprint(path: str | os.PathLike[str] | None) -> str | None:
    """``sha256:<hex>`` of the dataset file's bytes (None without a dataset or when it cannot be
    read): what a distributed run's master and workers compare, whatever path each was given."""
    if not path:
        return None
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return f"sha256:{digest.hexdigest()}"


@dataclass(slots=True)
class DatasetItem:
    """One conversation of the file: user turns in order, reference answer lengths (chars)."""

    turns: list[str]
    system: str | None = None
    answer_chars: list[int] = field(default_factory=list)
    max_tokens: int | None = None


def _item(obj: Any, where: str, fmt: str = "auto") -> DatasetItem | None:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: a record must be a JSON object")
    key = _FORMAT_KEY.get(fmt)
    if key is not None and key not in obj and not (key == "prompt" and "text" in obj):
        raise SpecError(
            "{where}: not a {fmt} record (no {key!r} key); {dataset_format} auto reads "
            "ShareGPT, OpenAI messages and prompt records side by side",
            where=where,
            fmt=fmt,
            key=key,
        )
    fixed = obj.get("max_tokens", obj.get("output_tokens"))
    if fixed is not None and (not isinstance(fixed, int) or isinstance(fixed, bool) or fixed < 1):
        raise UsageError(f"{where}: max_tokens must be a positive integer")
    msgs = obj.get("conversations", obj.get("messages"))
    if msgs is not None:
        if not isinstance(msgs, list):
            raise UsageError(f"{where}: conversations/messages must be a list")
        item = DatasetItem([], max_tokens=fixed)
        for m in msgs:
            if not isinstance(m, dict):
                raise UsageError(f"{where}: each turn must be an object")
            role = _ROLES.get(str(m.get("from", m.get("role", ""))).lower())
            text = m.get("value", m.get("content"))
            if role is None or not isinstance(text, str):
                raise UsageError(
                    f"{where}: a turn needs from/role (human, gpt, system, user, assistant) and "
                    "a string value/content"
                )
            if role == "system" and not item.turns:
                item.system = text
            elif role == "user":
                item.turns.append(text)
            elif role == "assistant" and item.turns:
                item.answer_chars.append(len(text))
        return item if item.turns else None
    text = obj.get("prompt", obj.get("text"))
    if text is None:
        raise UsageError(f"{where}: needs conversations (ShareGPT), messages or prompt")
    if not isinstance(text, str):
        raise UsageError(f"{where}: prompt must be a string")
    return DatasetItem([text], max_tokens=fixed) if text.strip() else None


def load_dataset(path: str | Path, fmt: str = "auto") -> list[DatasetItem]:
    """Every usable conversation of the file (records without a user turn are skipped)."""
    if fmt not in FORMATS:
        raise SpecError(
            "{dataset_format} {fmt!r}{hint}: {choices}",
            fmt=fmt,
            hint=did_you_mean(fmt, FORMATS),
            choices=", ".join(FORMATS),
        )
    p = Path(path)
    if not p.is_file():
        raise SpecError("{dataset} {path!r}: file not found", path=str(path))
    try:
        return _read(p, fmt)
    except OSError as exc:
        raise SpecError(
            "{dataset} {path!r}: cannot read it ({why})", path=str(path), why=exc.strerror
        ) from None


def _read(p: Path, fmt: str) -> list[DatasetItem]:
    items: list[DatasetItem] = []
    with open(p, encoding="utf-8", errors="replace") as fh:
        head = fh.read(1)
        while head and head.isspace():
            head = fh.read(1)
        fh.seek(0)
        if head == "[":
            try:
                data = json.load(fh)
            except ValueError as exc:
                raise UsageError(f"{p}: not valid JSON ({exc})") from None
            if not isinstance(data, list):
                raise UsageError(f"{p}: a JSON dataset must be an array of records")
            for i, obj in enumerate(data[:MAX_RECORDS]):
                it = _item(obj, f"{p}: record {i}", fmt)
                if it is not None:
                    items.append(it)
        else:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                if n > MAX_RECORDS:
                    break
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise UsageError(f"{p}:{n}: not a JSON object") from None
                it = _item(obj, f"{p}:{n}", fmt)
                if it is not None:
                    items.append(it)
    if not items:
        empty = p.stat().st_size == 0
        raise UsageError(f"{p}: " + ("empty file" if empty else "no record with a user turn"))
    return items


def check_dataset(path: str | None, fmt: str = "auto", scenario: str | None = None) -> None:
    """Fail before any traffic when the dataset file is bad (a :class:`UsageError` naming the
    file and line), or when the ``dataset`` scenario has no file. (The sizing knobs are checked
    where they are read: servecheck/scenarios/_options.py.)"""
    if scenario is not None and Path(scenario).stem == "dataset" and not path:
        raise SpecError("the dataset scenario needs {dataset} FILE (JSONL or ShareGPT)")
    if path:
        load_dataset(path, fmt)


def configured(cfg: Any) -> bool:
    """Whether this run's requests come from a dataset file (``RunConfig.dataset``)."""
    return bool(getattr(cfg, "dataset", None))


@dataclass(slots=True)
class DatasetPrompts:
    """The sampled, sized items of one process; ``pick`` gives single-turn prompts in order."""

    items: list[DatasetItem]
    first_tokens: list[int]
    method: str
    default_max_tokens: int
    dropped_for_context: int = 0
    next: int = 0

    @classmethod
    def build(
        cls,
        items: list[DatasetItem],
        seed: int,
        sample: int,
        count: Counter | None,
        context_length: int | None,
        default_max_tokens: int = 128,
    ) -> DatasetPrompts:
        rng = random.Random(seed * 9176 + 17)
        order = list(range(len(items)))
        rng.shuffle(order)
        chosen = [items[i] for i in order[:sample]]
        kept: list[DatasetItem] = []
        sizes: list[int] = []
        dropped = 0
        counted = count is not None
        for it in chosen:
            text = it.turns[0] if it.system is None else it.system + "\n" + it.turns[0]
            n = count(text) if count is not None else None
            if n is None:
                n, counted = approx_tokens(text), False
            out = _max_tokens(it, 0, default_max_tokens)
            if context_length and n + out > context_length - CHAT_TEMPLATE_TOKENS:
                dropped += 1
                continue
            kept.append(it)
            sizes.append(n)
        if not kept:
            raise UsageError(
                f"no dataset record fits the target's context ({context_length} tokens)"
            )
        method = "tokenize" if counted else APPROX_METHOD
        return cls(kept, sizes, method, default_max_tokens, dropped)

    def pick_item(self) -> tuple[DatasetItem, int]:
        i = self.next % len(self.items)
        self.next += 1
        return self.items[i], self.first_tokens[i]

    def request(self) -> PlannedRequest:
        """A single-turn request: the item's system prompt (if any) and its first user turn."""
        it, n = self.pick_item()
        msgs = ([{"role": "system", "content": it.system}] if it.system else []) + [
            {"role": "user", "content": it.turns[0]}
        ]
        return PlannedRequest(msgs, _max_tokens(it, 0, self.default_max_tokens), "dataset", n)


def _max_tokens(it: DatasetItem, turn: int, default: int) -> int:
    if it.max_tokens is not None:
        return it.max_tokens
    if turn < len(it.answer_chars):
        return max(1, approx_tokens("x" * it.answer_chars[turn]))
    return default


def turn_prompt(it: DatasetItem, turn: int, default: int) -> Prompt:
    """Turn ``turn`` of an item as a :class:`Prompt` (multi-turn use; lengths estimated)."""
    text = it.turns[turn]
    return Prompt(text, approx_tokens(text), _max_tokens(it, turn, default), "dataset")


# ------------------------------------------------------------------ per process, the mixin

_BUILT: dict[int, DatasetPrompts] = {}


def dataset_prompts(ctrl: Any) -> DatasetPrompts:
    """This process's sampled and sized dataset (built once, before the run's clock starts)."""
    cfg = ctrl.cfg
    dp = _BUILT.get(cfg.seed)
    if dp is not None:
        return dp
    path = cfg.dataset
    if not path:
        raise SpecError("the dataset scenario needs {dataset} FILE (JSONL or ShareGPT)")
    count, flavour = None, ""
    if cfg.use_tokenize:
        from servecheck.load.workload.prompts import tokenize_counter

        root = cfg.base_url.rstrip("/").removesuffix("/v1")
        count, flavour = tokenize_counter(root, cfg.model, ctrl.auth_headers())
    dp = DatasetPrompts.build(
        load_dataset(path, cfg.dataset_format),
        seed=cfg.seed * 31 + ctrl.index,
        sample=cfg.dataset_sample,
        count=count,
        context_length=cfg.context_length,
        default_max_tokens=cfg.dataset_max_tokens,
    )
    # The run's prompt_method says how the dataset's lengths were measured.
    ctrl.prompts.method = f"{dp.method}:{flavour}" if dp.method == "tokenize" else dp.method
    _BUILT[cfg.seed] = dp
    return dp


def opener(ctrl: Any) -> Any:
    """For :class:`~servecheck.load.workload.conversation.ConversationPool`: each new conversation follows
    one dataset item's user turns (the replies are the server's)."""
    dp = dataset_prompts(ctrl)

    def open_one(rng: random.Random) -> tuple[str | None, list[Prompt]]:
        it, _ = dp.pick_item()
        return it.system, [turn_prompt(it, k, dp.default_max_tokens) for k in range(len(it.turns))]

    return open_one


class DatasetMixin:
    """Single-turn requests from the run's dataset file (each item's first user turn)."""

    @classmethod
    def prepare_run(cls, ctrl: Any) -> None:
        dataset_prompts(ctrl)

    def plan_request(self, ctrl: Any) -> PlannedRequest:
        return dataset_prompts(ctrl).request()
