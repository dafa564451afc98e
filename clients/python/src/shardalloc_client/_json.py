"""The REST bodies' JSON and the client's dataclasses, both ways.

The node's JSON keys are camelCase (``shardId``); a body's dataclass
(:mod:`shardalloc_client.admin_types`) has the same fields in snake_case
(``shard_id``), or names its key in the field's metadata
(``field(metadata={"json": "type"})``). :func:`from_json` reads a body by
its dataclass's annotations (dataclasses, lists, dicts, ``X | None``,
``Literal``, ``Any`` and plain values); :func:`to_json` writes one.

A key that is absent reads as ``None`` when its field takes ``None`` (the
node leaves out what it has not got). Answers are read leniently: a key the client does not know is skipped (a
newer node may send more). ``strict=True`` refuses it instead, refuses a
missing key (even one the class could do without) and a value of the wrong
type: the contract test reads every body of
``contracts/rest/`` so, to fail when the node and this client disagree.
"""

import dataclasses
import re
import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

__all__ = ["JsonError", "from_json", "to_json", "json_key"]

T = TypeVar("T")


class JsonError(ValueError):
    """A body that does not read as its type; the message names the path to
    the value at fault (``StrategyState.active.atMs``)."""


def json_key(field: "dataclasses.Field[Any]") -> str:
    """The JSON key of a dataclass field: its ``json`` metadata, else its
    name in camelCase."""
    named = field.metadata.get("json")
    if isinstance(named, str):
        return named
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), field.name)


def from_json(kind: type[T], value: Any, *, strict: bool = False) -> T:
    """``value`` (decoded JSON) as ``kind``; :class:`JsonError` naming the
    path when it does not fit."""
    return typing.cast(T, _read(kind, value, kind.__name__, strict))


def _read(kind: Any, value: Any, path: str, strict: bool) -> Any:
    if kind is Any:
        return value
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        options = get_args(kind)
        if value is None and type(None) in options:
            return None
        problems = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _read(option, value, path, strict)
            except JsonError as problem:
                problems.append(str(problem))
        raise JsonError("; ".join(problems) or f"{path}: null where a value is needed")
    if origin is Literal:
        if value not in get_args(kind):
            if strict:
                raise JsonError(f"{path}: {value!r} is none of {list(get_args(kind))}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise JsonError(f"{path}: expected a list, got {type(value).__name__}")
        (item,) = get_args(kind)
        return [_read(item, v, f"{path}[{i}]", strict) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise JsonError(f"{path}: expected an object, got {type(value).__name__}")
        _, item = get_args(kind)
        return {k: _read(item, v, f"{path}.{k}", strict) for k, v in value.items()}
    if dataclasses.is_dataclass(kind):
        return _read_dataclass(kind, value, path, strict)
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(kind, type) and isinstance(value, kind):
        return value
    raise JsonError(f"{path}: expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")


def _read_dataclass(kind: Any, value: Any, path: str, strict: bool) -> Any:
    if not isinstance(value, dict):
        raise JsonError(f"{path}: expected an object, got {type(value).__name__}")
    hints = get_type_hints(kind)
    fields = {json_key(f): f for f in dataclasses.fields(kind) if f.init}
    if strict:
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise JsonError(f"{path}: the node sends {', '.join(unknown)}, which {kind.__name__} lacks")
    given: dict[str, Any] = {}
    for key, f in fields.items():
        if key in value:
            given[f.name] = _read(hints[f.name], value[key], f"{path}.{key}", strict)
        elif strict:
            raise JsonError(f"{path}: {key} is missing (the class has it, the node does not send it)")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if not _nullable(hints[f.name]):
                raise JsonError(f"{path}: {key} is missing")
            given[f.name] = None
    return kind(**given)


def _nullable(kind: Any) -> bool:
    """Whether ``kind`` takes ``None``: the node leaves such a key out as
    often as it sends ``null``."""
    return kind is Any or (get_origin(kind) in (Union, types.UnionType) and type(None) in get_args(kind))


def to_json(value: Any) -> Any:
    """``value`` as JSON values: a dataclass as an object of its keys (a
    field that is ``None`` left out), lists and dicts item by item."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is not None:
                out[json_key(f)] = to_json(item)
        return out
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value
