"""Build frozen dataclasses from TOML tables, with one-line errors naming file and key.

Field metadata drives validation: ``min``, ``max`` (inclusive), ``choices``, ``help``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from mqlab.errors import ScenarioError

T = TypeVar("T")


class SettingsProblem(ValueError):
    """Raised by a settings dataclass's ``__post_init__`` when fields disagree with each
    other (each alone passed its own checks): ``build`` turns it into the one-line
    ScenarioError naming the file and ``key``."""

    def __init__(self, key: str, problem: str, fix: str | None = None):
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem
        self.fix = fix


def _type_name(tp: Any) -> str:
    if tp is bool:
        return "true/false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if dataclasses.is_dataclass(tp):
        return "a table"
    return str(tp)


def _convert(value: Any, tp: Any, path: Path, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(value, args[0], path, key)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ScenarioError(path, key, f"expected a table, got {value!r}", f"write [{key}]")
        return build(tp, value, path, key)  # type: ignore[arg-type]
    if tp is bool:
        if not isinstance(value, bool):
            raise ScenarioError(path, key, f"expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(path, key, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ScenarioError(path, key, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ScenarioError(path, key, f"expected a string, got {value!r}")
        return value
    if origin is tuple:
        (inner, _ellipsis) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ScenarioError(path, key, f"expected a list, got {value!r}")
        return tuple(_convert(v, inner, path, f"{key}[{i}]") for i, v in enumerate(value))
    return value


def build(cls: type[T], table: dict[str, Any], path: Path, prefix: str = "") -> T:
    """Instantiate dataclass ``cls`` from ``table``; every problem is a ScenarioError."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    dotted = (prefix + ".") if prefix else ""
    unknown = sorted(set(table) - set(fields))
    if unknown:
        where = f"[{prefix}]" if prefix else "the top level"
        raise ScenarioError(
            path,
            dotted + unknown[0],
            "unknown key",
            f"allowed in {where}: {', '.join(sorted(fields))}",
        )
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        key = dotted + name
        if name not in table:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ScenarioError(
                    path,
                    key,
                    "missing",
                    f"add {name} = {_type_name(hints[name])}"
                    + (f" ({f.metadata['help']})" if "help" in f.metadata else ""),
                )
            continue
        value = _convert(table[name], hints[name], path, key)
        check_value(f, value, path, key)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except SettingsProblem as e:
        raise ScenarioError(path, dotted + e.key, e.problem, e.fix) from None


def check_value(f: dataclasses.Field[Any], value: Any, path: Path, key: str) -> None:
    md = f.metadata
    if value is None:
        return
    if "choices" in md and value not in md["choices"]:
        raise ScenarioError(
            path, key, f"{value!r} is not allowed", "one of: " + ", ".join(map(str, md["choices"]))
        )
    if "min" in md and value < md["min"]:
        raise ScenarioError(path, key, f"{value!r} is too small", f"must be >= {md['min']}")
    if "max" in md and value > md["max"]:
        raise ScenarioError(path, key, f"{value!r} is too large", f"must be <= {md['max']}")


def spec(default: Any = dataclasses.MISSING, **metadata: Any) -> Any:
    """A dataclass field with validation metadata."""
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def to_table(obj: Any) -> dict[str, Any]:
    """Dataclass → TOML-able dict (None values dropped)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if v is None:
            continue
        if dataclasses.is_dataclass(v):
            out[f.name] = to_table(v)
        elif isinstance(v, tuple):
            out[f.name] = [to_table(x) if dataclasses.is_dataclass(x) else x for x in v]
        else:
            out[f.name] = v
    return out
