"""Dataclasses as JSON documents, both ways, and their JSON Schema: one walk over the fields.

A written file (summary.json) is a dataclass whose :func:`to_json` gives exactly the keys the
file has always had; :func:`from_json` reads one back for the report; :func:`json_schema`
describes it for whoever else reads the file. Two field options keep old layouts without a
dataclass per quirk (``field(metadata=...)``):

- ``OMIT``: the key is left out when the value is None (a section only some runs have);
- ``FLATTEN``: the value's keys go into the parent object (summary.json's head, the steady
  window's figures), and a None adds no key.

The types a field may have: ``bool``, ``int``, ``float``, ``str``, ``None``, a union of them,
``list[X]``, ``dict[str, X]``, ``Any`` (a JSON value the type does not describe yet) and another
such dataclass.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

OMIT = {"omit": True}
FLATTEN = {"flatten": True}

_SCALARS: dict[Any, dict[str, Any]] = {
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    type(None): {"type": "null"},
}


def _fields(cls: type) -> list[tuple[dataclasses.Field[Any], Any]]:
    hints = typing.get_type_hints(cls)  # resolved per call: a summary is written once a run
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def to_json(obj: Any) -> Any:
    """The JSON value of ``obj``: a dataclass becomes an object by its fields (OMIT, FLATTEN)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f, _tp in _fields(type(obj)):
            value = getattr(obj, f.name)
            if f.metadata.get("flatten"):
                if value is not None:
                    out.update(to_json(value))
            elif value is not None or not f.metadata.get("omit"):
                out[f.name] = to_json(value)
        return out
    if isinstance(obj, list):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    return obj


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _dataclass_in(tp: Any) -> type | None:
    """The dataclass a field holds (``X`` or ``X | None``), if it holds one."""
    options = typing.get_args(tp) if _is_union(tp) else (tp,)
    return next((t for t in options if isinstance(t, type) and dataclasses.is_dataclass(t)), None)


def _value_of(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    cls = _dataclass_in(tp)
    if cls is not None:
        return from_json(cls, value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and args and dataclasses.is_dataclass(args[0]):
        return [_value_of(args[0], v) for v in value]
    if origin is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return {k: _value_of(args[1], v) for k, v in value.items()}
    return value


T = typing.TypeVar("T")


def from_json(cls: type[T], doc: dict[str, Any]) -> T:
    """``cls`` from its JSON object; a key the file lacks (an older run) reads as None, and a
    flattened part takes its keys from ``doc`` itself."""
    kwargs: dict[str, Any] = {}
    for f, tp in _fields(cls):
        if f.metadata.get("flatten"):
            part = _dataclass_in(tp)
            if part is not None:
                kwargs[f.name] = from_json(part, doc)
            else:  # a dict of whatever keys follow (the steady window's figures)
                kwargs[f.name] = {k: doc[k] for k in _flat_keys(cls, f.name) if k in doc} or None
        else:
            kwargs[f.name] = _value_of(tp, doc.get(f.name))
    return cls(**kwargs)


def _flat_keys(cls: type, name: str) -> tuple[str, ...]:
    keys: tuple[str, ...] = getattr(cls, "FLAT_KEYS", {}).get(name, ())
    return keys


def json_schema(tp: Any, defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a field type; dataclasses go into ``defs`` by name."""
    if tp is Any:
        return {}
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if _is_union(tp):
        return {"anyOf": [json_schema(t, defs) for t in typing.get_args(tp)]}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        return {"type": "array", "items": json_schema(args[0], defs) if args else {}}
    if origin is dict:
        return {"type": "object", "additionalProperties": json_schema(args[1], defs)}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        defs = {} if defs is None else defs
        if tp.__name__ not in defs:
            defs[tp.__name__] = {}  # a placeholder against recursion
            defs[tp.__name__] = _object_schema(tp, defs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _object_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    for f, tp in _fields(cls):
        if f.metadata.get("flatten"):
            part = _dataclass_in(tp)
            if part is not None:
                inner = _object_schema(part, defs)
                props.update(inner["properties"])
                required += inner.get("required", [])
            else:
                props.update({k: {} for k in _flat_keys(cls, f.name)})
            continue
        props[f.name] = json_schema(tp, defs)
        if not f.metadata.get("omit"):
            required.append(f.name)
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    return out


def document_schema(cls: type, title: str) -> dict[str, Any]:
    """The schema of a whole document whose root is ``cls``."""
    defs: dict[str, Any] = {}
    root = _object_schema(cls, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        **root,
        "$defs": dict(sorted(defs.items())),
    }


__all__ = ["FLATTEN", "OMIT", "document_schema", "from_json", "json_schema", "to_json"]
