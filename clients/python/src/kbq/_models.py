"""Turning JSON into the dataclasses of :mod:`kbq.types`."""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from . import types as _types


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls, vars(_types))


def build(tp: Any, data: Any) -> Any:
    """``data`` (parsed JSON) as ``tp``: dataclasses built field by field, lists and optionals
    followed, anything else as it came. Keys the class does not know (fields a newer kbq
    added within v1) are left out."""
    if data is None:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return build(args[0], data)
        return data
    if origin in (list, typing.List) and isinstance(data, list):
        (item,) = typing.get_args(tp) or (Any,)
        return [build(item, x) for x in data]
    if dataclasses.is_dataclass(tp) and isinstance(data, dict):
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            key = f.name[:-1] if f.name.endswith("_") else f.name
            if key in data:
                kwargs[f.name] = build(hints[f.name], data[key])
        return tp(**kwargs)
    return data


def dump(value: Any) -> Any:
    """A dataclass (or a list or dict of them) as JSON-ready data, without the fields left
    at ``None``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if v is not None:
                out[f.name[:-1] if f.name.endswith("_") else f.name] = dump(v)
        return out
    if isinstance(value, (list, tuple)):
        return [dump(v) for v in value]
    if isinstance(value, dict):
        return {k: dump(v) for k, v in value.items()}
    return value
