"""Load and validate targets.yaml.

Order of work: parse YAML (keeping line numbers), merge ``defaults`` under each target, expand
``${VAR}`` / ``${VAR:-fallback}`` from the environment, validate with pydantic. Every problem
becomes a :class:`ConfigError` whose lines read ``FILE:LINE: KEY.PATH: what is wrong (hint)``.

A ``${VAR}`` that is unset does not stop targets that nobody selected: the target is kept with
its problem, and :meth:`Targets.get` raises when a run selects it. ``servecheck targets``
reports every problem in the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from servecheck.config.model import ENGINES, Defaults, Target, TargetsFile
from servecheck.config.provenance import remember
from servecheck.errors import SpecError, UsageError, did_you_mean
from servecheck.redact import register

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_TARGETS_FILE = "SERVECHECK_TARGETS_FILE"
DEFAULT_FILE = "targets.yaml"
# Where no targets file is named and ./targets.yaml does not exist: the embedded reference alone.
BUILTIN_FILE = Path(__file__).with_name("builtin_targets.yaml")
_SECRET_KEYS = ("api_key",)


class ConfigError(UsageError):
    """One or more problems in a targets file; ``problems`` holds one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(slots=True)
class Targets:
    """The validated file: targets by name, plus the problems of targets that could not load."""

    path: Path
    targets: dict[str, Target]
    broken: dict[str, list[str]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [*self.targets, *self.broken]

    def get(self, name: str) -> Target:
        if name in self.broken:
            raise ConfigError(self.broken[name])
        if name not in self.targets:
            raise UsageError(
                f"{self.path}: no target named {name!r}{did_you_mean(name, self.names)};"
                f" targets: {', '.join(self.names) or '(none)'}"
            )
        return self.targets[name]

    def select(self, names: Iterable[str]) -> list[Target]:
        wanted = list(names)
        if not wanted or "all" in wanted:
            problems = [p for plist in self.broken.values() for p in plist]
            if problems and "all" in wanted:
                raise ConfigError(problems)
            return list(self.targets.values())
        return [self.get(n) for n in wanted]


def _line_map(node: yaml.Node, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], int]]:
    yield path, node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            yield (*path, key), key_node.start_mark.line + 1
            yield from _line_map(value_node, (*path, key))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _line_map(item, (*path, i))


def _fmt_path(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


class _Locator:
    def __init__(self, path: Path, lines: dict[tuple[Any, ...], int]) -> None:
        self.path = path
        self.lines = lines

    def where(self, loc: tuple[Any, ...]) -> str:
        probe = loc
        while probe and probe not in self.lines:
            probe = probe[:-1]
        line = self.lines.get(probe)
        return f"{self.path}:{line}" if line else f"{self.path}"

    def problem(self, loc: tuple[Any, ...], message: str) -> str:
        return f"{self.where(loc)}: {_fmt_path(loc)}: {message}"


class _BadReference(ValueError):
    """A ``${...}`` that is not ``${NAME}`` or ``${NAME:-fallback}``."""


def _expand_text(
    text: str,
    env: Mapping[str, str],
    missing: list[str],
    used: list[tuple[str, str]] | None = None,
) -> str:
    """``text`` with every ``${NAME}`` / ``${NAME:-fallback}`` replaced; a fallback may itself
    hold references (``${A:-${B:-x}}``), expanded only when it is used. Unset names without a
    fallback go to ``missing``; each variable whose value was used goes to ``used`` with it. A
    ``$`` not followed by ``{`` and a name stays as written."""
    out: list[str] = []
    i = 0
    while (j := text.find("${", i)) >= 0:
        name = _VAR_NAME.match(text, j + 2)
        if name is None:  # "${" without a name: literal text, as before
            out.append(text[i : j + 2])
            i = j + 2
            continue
        out.append(text[i:j])
        var, k = name.group(0), name.end()
        if text.startswith("}", k):
            if var in env:
                out.append(env[var])
                if used is not None:
                    used.append((var, env[var]))
            else:
                missing.append(var)
            i = k + 1
            continue
        if not text.startswith(":-", k):
            raise _BadReference(
                f"${{{var}{text[k : k + 1]}...: write ${{{var}}} or ${{{var}:-fallback}}"
            )
        depth, p = 0, k + 2
        while p < len(text):
            if text.startswith("${", p):
                depth, p = depth + 1, p + 2
                continue
            if text[p] == "}":
                if depth == 0:
                    break
                depth -= 1
            p += 1
        else:
            raise _BadReference(f"${{{var}:-... has no closing '}}'")
        if var in env:
            out.append(env[var])
            if used is not None:
                used.append((var, env[var]))
        else:
            out.append(_expand_text(text[k + 2 : p], env, missing, used))
        i = p + 1
    out.append(text[i:])
    return "".join(out)


def _expand(
    value: Any,
    loc: tuple[Any, ...],
    env: Mapping[str, str],
    errors: list[tuple[tuple[Any, ...], str]],
    bad: list[tuple[tuple[Any, ...], str]] | None = None,
) -> Any:
    """``value`` with its references expanded; unset variables go to ``errors`` and malformed
    references to ``bad`` (a mistake in the file, never a matter of the environment)."""
    if isinstance(value, str):
        missing: list[str] = []
        used: list[tuple[str, str]] = []
        try:
            expanded = _expand_text(value, env, missing, used)
        except _BadReference as exc:
            (errors if bad is None else bad).append((loc, f"bad variable reference {exc}"))
            return ""
        for var in dict.fromkeys(missing):
            errors.append(
                (
                    loc,
                    f"environment variable {var} is not set (export it, or write ${{{var}:-}} to make it optional)",
                )
            )
        secret = bool(loc) and loc[-1] in _SECRET_KEYS or (len(loc) >= 2 and loc[-2] == "headers")
        if secret and expanded != value:
            register(expanded)
            for var, var_value in used:  # a curl line names ${VAR}, never its value
                remember(var_value, var)
        return expanded
    if isinstance(value, dict):
        return {k: _expand(v, (*loc, k), env, errors, bad) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, (*loc, i), env, errors, bad) for i, v in enumerate(value)]
    return value


def _model_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names valid at ``loc`` (for did-you-mean on unknown keys)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field_info = getattr(current, "model_fields", {}).get(part)
        if field_info is None:
            return []
        annotation = field_info.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if current is None:
            return []
    return list(getattr(current, "model_fields", {}))


def _pydantic_problems(
    exc: ValidationError, base_loc: tuple[Any, ...], model: type[BaseModel], raw: Any
) -> list[tuple[tuple[Any, ...], str]]:
    out: list[tuple[tuple[Any, ...], str]] = []
    unions: dict[tuple[Any, ...], tuple[list[str], Any]] = {}
    for err in exc.errors():
        loc = tuple(err["loc"])
        kind = err["type"]
        if loc and isinstance(loc[-1], str) and _UNION_TAG.match(loc[-1]):
            # One error per branch of a union (``bool | Literal["auto"]``): pydantic's internal
            # tags (``.bool``, ``.literal['auto']``) mean nothing to a user; say it once.
            choices, _ = unions.setdefault(loc[:-1], ([], err.get("input")))
            tag = loc[-1]
            choices += (
                re.findall(r"'([^']*)'", tag)
                if tag.startswith("literal")
                else [
                    {
                        "bool": "true|false",
                        "int": "a whole number",
                        "float": "a number",
                        "str": "a string",
                    }.get(tag, tag)
                ]
            )
            continue
        if kind == "extra_forbidden":
            key = str(loc[-1])
            hint = did_you_mean(key, _model_fields(model, loc[:-1]))
            message = f"unknown key {key!r}{hint}"
        elif kind == "literal_error":
            given = err.get("input")
            expected = err.get("ctx", {}).get("expected", "")
            choices = re.findall(r"'([^']*)'", expected)
            hint = did_you_mean(str(given), choices) if choices else ""
            message = f"{given!r} is not one of {'|'.join(choices) or expected}{hint}"
        elif kind == "missing":
            message = "required key is missing"
        else:
            message = err["msg"].removeprefix("Value error, ")
            given = err.get("input")
            secret = "api_key" in loc or "headers" in loc
            if (
                not secret
                and given is not None
                and not isinstance(given, dict | list)
                and repr(given) not in message
            ):
                message += f" (got {given!r})"
        out.append(((*base_loc, *loc), message))
    for loc, (choices, given) in unions.items():
        out.append(((*base_loc, *loc), f"{given!r} is not one of {'|'.join(choices)}"))
    return out


_UNION_TAG = re.compile(r"^(bool|int|float|str|literal\[.*\]|function-\w+\[.*\])$")


def _merge(defaults: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    merged = dict(defaults)
    for key, value in target.items():
        if (
            key in ("capabilities", "headers", "allow", "known_failures", "telemetry")
            and isinstance(value, dict)
            and isinstance(merged.get(key), dict)
        ):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


MAX_FILE_BYTES = 1024 * 1024  # a targets file is a few KiB; a huge one is a mistake
MAX_NODES = 100_000  # YAML values after alias expansion (a "billion laughs" file has 10^9)


def _expanded_size(node: yaml.Node | None) -> int:
    """How many values the document holds once every alias is expanded, computed without
    expanding (an alias is the same node object; its size is counted once per use)."""
    sizes: dict[int, int] = {}

    def size(n: yaml.Node) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        sizes[key] = 1  # a recursive alias counts once; SafeLoader rejects it later anyway
        if isinstance(n, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in n.value)
        elif isinstance(n, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in n.value)
        else:
            total = 1
        sizes[key] = min(total, MAX_NODES + 1)
        return sizes[key]

    return 0 if node is None else size(node)


def _slos_parsed(target: Target) -> bool:
    """Whether every ``slo:`` line of ``target`` parsed when it was built."""
    try:
        _ = target.slos
    except UsageError:
        return False
    return True


def _slo_problems(
    slos: list[str], loc: tuple[Any, ...], merged: dict[str, Any]
) -> list[tuple[tuple[Any, ...], str]]:
    """``slo:`` lines that do not parse, each at its own line. The grammar lives with the load
    engine (``servecheck/analysis/slo.py``, imported here only); a typo must stop every
    command here, not only ``load`` after readiness and the whole catalogue."""
    from servecheck.analysis.slo import parse_slos

    raw = merged.get("slo")
    own: list[Any] = raw if isinstance(raw, list) else []
    problems: list[tuple[tuple[Any, ...], str]] = []
    for i, text in enumerate(slos):
        try:
            parse_slos([text], "targets.yaml")
        except UsageError as exc:
            where = (*loc, i) if i < len(own) else ("defaults", "slo")
            problems.append((where, str(exc)))
    return problems


def _read_targets_text(file: Path) -> str:
    """The targets file's text, bounded in size; a missing or unreadable file is a UsageError."""
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UsageError(
                f"{file}: {size} bytes; a targets file is at most {MAX_FILE_BYTES} bytes "
                "(is this the right file?)"
            )
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            "{file}: targets file not found (pass {targets_file} or set {env})",
            file=file,
            env=ENV_TARGETS_FILE,
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{file}: cannot read targets file: {exc}") from None


def _duplicate_keys(file: Path, node: yaml.Node | None) -> Iterator[str]:
    """A key given twice in one mapping: YAML loaders keep the last silently, so a second
    ``known_failures:`` would drop the first's entries without a word."""
    stack = [node] if node is not None else []
    seen_nodes: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen_nodes:
            continue
        seen_nodes.add(id(n))
        if isinstance(n, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key, value in n.value:
                if isinstance(key, yaml.ScalarNode):
                    line = key.start_mark.line + 1
                    if key.value in first:
                        yield (
                            f"{file}:{line}: duplicate key {key.value!r} (first at line "
                            f"{first[key.value]}; YAML keeps only the last): merge the two"
                        )
                    first.setdefault(key.value, line)
                stack.append(value)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def _parse_yaml(file: Path, text: str) -> tuple[Any, Any]:
    """The composed node (for line numbers) and the data; an alias bomb or bad YAML stops."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        expanded = _expanded_size(node)
        if expanded > MAX_NODES:
            raise UsageError(
                f"{file}: YAML aliases expand to more than {MAX_NODES} values (an alias bomb?); "
                "refusing to load it"
            )
        duplicates = list(_duplicate_keys(file, node))
        if duplicates:
            raise ConfigError(duplicates)
        return node, yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{where}: invalid YAML: {problem}"]) from None


def shipped_target(port: int) -> tuple[str | None, bool]:
    """The packaged target of the local engine on ``port`` (``servecheck engine up``), and
    whether the targets file in effect here (``$SERVECHECK_TARGETS_FILE``, ./targets.yaml, else
    the packaged one) lists it: ``(None, False)`` when none is shipped for that port."""
    try:
        shipped = load_targets(BUILTIN_FILE)
    except UsageError:
        return None, False
    prefix = f"http://127.0.0.1:{port}/"
    name = next((t.name for t in shipped.targets.values() if t.base_url.startswith(prefix)), None)
    if name is None:
        return None, False
    try:
        here = load_targets(None).names
    except UsageError:
        here = []
    return name, name in here


def load_targets(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Targets:
    """Read and validate a targets file. Raises :class:`ConfigError` (a UsageError) on problems.

    ``path`` ``None``: ``$SERVECHECK_TARGETS_FILE``, else ``./targets.yaml``, else (no such file)
    the built-in file with only the embedded ``reference`` target (:data:`BUILTIN_FILE`).
    """
    env = os.environ if env is None else env
    named = path or env.get(ENV_TARGETS_FILE)
    file = Path(named or DEFAULT_FILE)
    if not named and not file.exists():
        file = BUILTIN_FILE
    text = _read_targets_text(file)
    node, data = _parse_yaml(file, text)
    locator = _Locator(file, dict(_line_map(node)) if node is not None else {})
    if not isinstance(data, dict):
        raise ConfigError([f"{file}: the file must be a mapping with a 'targets' list"])
    unknown = [k for k in data if k not in ("defaults", "targets")]
    if unknown:
        raise ConfigError(
            [
                locator.problem(
                    (k,), f"unknown key {k!r}{did_you_mean(str(k), ['defaults', 'targets'])}"
                )
                for k in unknown
            ]
        )
    raw_targets = data.get("targets")
    if not isinstance(raw_targets, list) or not raw_targets:
        raise ConfigError([locator.problem(("targets",), "must be a non-empty list of targets")])
    raw_defaults = data.get("defaults") or {}
    if not isinstance(raw_defaults, dict):
        raise ConfigError([locator.problem(("defaults",), "must be a mapping")])

    fatal: list[str] = []
    env_errors: list[tuple[tuple[Any, ...], str]] = []
    defaults = _expand(raw_defaults, ("defaults",), env, env_errors)
    if env_errors:
        fatal += [locator.problem(loc, msg) for loc, msg in env_errors]
    try:
        Defaults.model_validate(defaults)
    except ValidationError as exc:
        fatal += [
            locator.problem(loc, msg)
            for loc, msg in _pydantic_problems(exc, ("defaults",), Defaults, defaults)
        ]

    targets: dict[str, Target] = {}
    broken: dict[str, list[str]] = {}
    seen_names: dict[str, int] = {}
    for index, raw in enumerate(raw_targets):
        loc = ("targets", index)
        if not isinstance(raw, dict):
            fatal.append(
                locator.problem(
                    loc, "each target must be a mapping with at least name and base_url"
                )
            )
            continue
        name: str = raw["name"] if isinstance(raw.get("name"), str) else f"#{index}"
        if name in seen_names:
            fatal.append(
                locator.problem(
                    (*loc, "name"),
                    f"duplicate target name {name!r} (first at targets[{seen_names[name]}])",
                )
            )
            continue
        seen_names[name] = index
        target_env_errors: list[tuple[tuple[Any, ...], str]] = []
        bad_refs: list[tuple[tuple[Any, ...], str]] = []
        expanded = _expand(raw, loc, env, target_env_errors, bad_refs)
        if bad_refs:
            fatal += [locator.problem(where, m) for where, m in bad_refs]
            continue
        merged = _merge(defaults if isinstance(defaults, dict) else {}, expanded)
        try:
            target = Target.model_validate(merged)
        except ValidationError as exc:
            problems = _pydantic_problems(exc, loc, Target, merged)
            emptied = {where for where, _ in target_env_errors}
            if target_env_errors and all(where in emptied for where, _ in problems):
                # Only the values an unset variable left empty (base_url '') are invalid: the
                # variable is the cause to name, and it stops only a run that selects this target.
                broken[name] = [locator.problem(where, m) for where, m in target_env_errors]
                continue
            fatal += [locator.problem(where, m) for where, m in problems if where not in emptied]
            continue
        # Target parsed its slo: lines when it was built; only a line that did not parse is
        # parsed again, one at a time, to name it with its file and line.
        slo_problems = (
            [] if _slos_parsed(target) else _slo_problems(target.slo, (*loc, "slo"), merged)
        )
        if slo_problems:
            fatal += [locator.problem(where, m) for where, m in slo_problems]
            continue
        if target_env_errors:
            broken[name] = [locator.problem(where, m) for where, m in target_env_errors]
        else:
            targets[name] = target
    if fatal:
        raise ConfigError(fatal)
    return Targets(path=file, targets=targets, broken=broken)


def targets_json_schema() -> dict[str, Any]:
    """JSON Schema of targets.yaml, for editors (yaml-language-server)."""
    schema = TargetsFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "servecheck targets.yaml"
    return schema


__all__ = ["ENGINES", "ConfigError", "Targets", "load_targets", "targets_json_schema"]
