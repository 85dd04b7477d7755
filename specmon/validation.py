"""Settings read from what a person wrote (a layout file, a ramp's flags), one value at a time.

The one validator of the ramp plan (plan.py) and of layout files (servers/layout.py), both plain
dataclasses: pydantic cost ~0.1 s of CPU at every start-up, a twentieth of a whole 1,000-stream
ramp's. Values are read lax, as pydantic's lax mode did (the words and the results a layout had
with it are kept): an integral float is an integer (`1.0e+11`), a digit string a number (`"7"`,
`" 7.0 "`), `yes`/`no` a boolean, YAML's !!binary its text. Whether a boolean may be a number is
the caller's: the plan refuses it, a layout reads `port: true` as 1 as it always did. The plan
reads text as int() and float() do (`as_layout` off), as it always did.

A bad value raises Invalid: where (`("arms", 1, "launch", "port")`) and what was expected
(`expected an integer, got 'abc'`). `Checked` dataclasses read a mapping field by field in
their declared order (the first bad field is the one named), refuse unknown keys, then apply
their own rules; `field(...)` declares a field's bounds and its check.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
import typing
from collections.abc import Callable
from typing import Any, Optional, Union

from specmon.bounds import _short


class Invalid(ValueError):
    """One bad value: where (`("levels", 1)`; `()` for the whole) and what was expected
    (`expected an integer, got 'x'`)."""

    def __init__(self, loc: tuple, text: str):
        super().__init__(f"{where(loc)}: {text}" if loc else text)
        self.loc, self.text = loc, text


def where(loc: tuple) -> str:
    """`("levels", 1)` -> `levels[1]`."""
    return "".join(f"[{p}]" if isinstance(p, int) else ("." if i else "") + str(p) for i, p in enumerate(loc))


# --------------------------------------------------------------------------------------------
# One value as its type

# pydantic held integers in 64 bits, and read at most 4,300 digits (as int() does).
_I64 = 2**63
_MAX_DIGITS = 4_300
_SIZE_TEXT = "expected unable to parse input string as an integer, exceeded maximum size"
_INT_TEXT = re.compile(r"[+-]?[0-9](?:_?[0-9])*(?:\.0+)?")  # "7", "+1_000", "7.00" (pydantic's)
TRUE = {"1", "on", "t", "true", "y", "yes"}
FALSE = {"0", "off", "f", "false", "n", "no"}


def text_of(v: Any) -> Any:
    """Bytes (YAML's !!binary) as their text when they are UTF-8; anything else as it is."""
    if isinstance(v, (bytes, bytearray)):
        try:
            return v.decode()
        except UnicodeDecodeError:
            pass
    return v


def integer(v: Any, loc: tuple, *, as_layout: bool = False) -> int:
    """An int; a boolean is 1 or 0 (a caller that refuses them does so first). Text is read as
    int() reads it, or `as_layout` as layouts always read it (pydantic's rules: `"7.0"` is 7,
    ASCII digits, !!binary too; what did not fit 64 bits refused in its words)."""
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise Invalid(loc, f"expected a finite number, got {_short(v)}")
        if v.is_integer():
            if as_layout and not -_I64 < v < _I64:
                raise Invalid(loc, f"{_SIZE_TEXT}, got {_short(v)}")
            return int(v)
    elif as_layout and isinstance(v, (str, bytes)):
        text = text_of(v)
        if isinstance(text, str) and _INT_TEXT.fullmatch(text.strip()):
            digits = text.strip().split(".")[0]
            if len(digits) > _MAX_DIGITS:
                raise Invalid(loc, f"{_SIZE_TEXT}, got {_short(v)}")
            return int(digits)
    elif isinstance(v, str):
        try:
            return int(v)  # "7", " 7 ", "1_000"
        except ValueError:
            pass
    raise Invalid(loc, f"expected an integer, got {_short(v)}")


def number(v: Any, loc: tuple, *, as_layout: bool = False) -> float:
    """A float (inf and nan too: the caller bounds it); a boolean is 1.0 or 0.0. Text is read as
    float() reads it, or `as_layout` as layouts always read it (pydantic's rules)."""
    if isinstance(v, (int, float)):
        try:
            return float(v)
        except OverflowError:  # an integer beyond any float
            pass
    elif as_layout and isinstance(v, (str, bytes)):
        text = text_of(v)
        if isinstance(text, str) and text.isascii():
            # " 1e3 ", "inf"; else without underscores ("1_000.5"), none at an end or two
            # together, and then without spaces around it
            plain = text.strip()
            if "_" in plain and not (text[0] == "_" or text[-1] == "_" or "__" in text):
                plain = text.replace("_", "")
            if "_" not in plain and plain == plain.strip():
                try:
                    return float(plain)
                except ValueError:
                    pass
    elif isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            pass
    raise Invalid(loc, f"expected a number, got {_short(v)}")


def boolean(v: Any, loc: tuple) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in TRUE | FALSE:
        return v.strip().lower() in TRUE
    raise Invalid(loc, f"expected true or false, got {_short(v)}")


def string(v: Any, loc: tuple, *, as_layout: bool = False) -> str:
    text = text_of(v) if as_layout else v
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)) and as_layout:
        raise Invalid(loc, f"expected a valid string, unable to parse raw data as a unicode string, got {_short(v)}")
    raise Invalid(loc, f"expected a string, got {_short(v)}")


def items(v: Any, loc: tuple) -> list:
    """A list's items (a tuple's, a set's: YAML's !!set and !!omap are lists here)."""
    if isinstance(v, (list, tuple, set, frozenset)):
        return list(v)
    raise Invalid(loc, f"expected a list, got {_short(v)}")


def key_loc(key: Any) -> Any:
    """A mapping key as a place in a loc (an int stays one, as an index is shown)."""
    return int(key) if isinstance(key, int) else key if isinstance(key, str) else str(key)


def mapping(v: Any, loc: tuple) -> dict[str, Any]:
    """A mapping with string keys; a bad key is named at `loc[KEY].[key]`."""
    if not isinstance(v, dict):
        raise Invalid(loc, f"expected a mapping, got {_short(v)}")
    return {string(k, loc + (key_loc(k), "[key]")): x for k, x in v.items()}


# --------------------------------------------------------------------------------------------
# Dataclasses read from a mapping

def field(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING,
          check: Optional[Callable[[Any], Any]] = None, plain: bool = False,
          gt: Optional[float] = None, ge: Optional[float] = None, le: Optional[float] = None,
          hidden: bool = False) -> Any:
    """A Checked field: bounds (a float's are also finite), `check(value) -> value` (ValueError:
    what was expected) after its type, or `plain`: `check` reads the raw value itself. `hidden`:
    set by the program (left out of the dump and of the keys a user is told of)."""
    meta = {"check": check, "plain": plain, "gt": gt, "ge": ge, "le": le, "hidden": hidden}
    return dataclasses.field(default=default, default_factory=factory, metadata=meta)


_HINTS: dict[type, dict[str, Any]] = {}


class Checked:
    """A dataclass whose fields are read and checked when it is made (`Checked.read(mapping)` or
    by its constructor); `rules()` checks fields against each other."""

    def __post_init__(self) -> None:
        for name, value in _read_fields(type(self), self.__dict__, ()).items():
            object.__setattr__(self, name, value)
        self.rules()

    def rules(self) -> None:
        """Rules that join fields: ValueError, said of the whole."""

    @classmethod
    def read(cls, data: Any, loc: tuple = ()) -> Any:
        """One from a mapping: its fields in order (the first bad one raises), then keys it does
        not have, then its rules."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise Invalid(loc, f"expected a mapping, got {_short(data)}")
        names = {f.name for f in dataclasses.fields(cls)}
        values = _read_fields(cls, {k: v for k, v in data.items() if isinstance(k, str) and k in names}, loc)
        for key in data:
            if not isinstance(key, str):  # (the words layouts had from pydantic, kept)
                raise Invalid(loc + (key_loc(key),), f"expected keys should be strings, got {_short(key)}")
            if key not in names:
                raise Invalid(loc + (key,), f"unknown key (expected one of: {', '.join(keys_of(cls))})")
        made = object.__new__(cls)  # the values are read: __init__ would read them again
        made.__dict__.update(values)
        _at(loc, made.rules)
        return made

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields, the hidden ones left out."""
        return {f.name: to_json(getattr(self, f.name)) for f in dataclasses.fields(self) if not f.metadata.get("hidden")}


def keys_of(cls: type) -> list[str]:
    """The keys a user may write for a Checked class."""
    return [f.name for f in dataclasses.fields(cls) if not f.metadata.get("hidden")]


def _at(loc: tuple, check: Callable[..., Any], *args: Any) -> Any:
    """`check(*args)`, its ValueError said at `loc` (an Invalid's own loc inside it)."""
    try:
        return check(*args)
    except Invalid as e:
        raise Invalid(loc + e.loc, e.text) from None
    except ValueError as e:
        raise Invalid(loc, str(e)) from None


def _read_fields(cls: type, values: dict[str, Any], loc: tuple) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        here = loc + (f.name,)
        if f.name in values:
            raw = values[f.name]
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
            continue
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
            continue
        else:
            raise Invalid(here, "required key is missing")
        meta = f.metadata
        if meta.get("plain"):
            out[f.name] = _at(here, meta["check"], raw)
            continue
        value = read_as(hints[f.name], raw, here)
        if value is not None:
            _bounded(value, raw, here, meta)
            if meta.get("check") is not None:
                value = _at(here, meta["check"], value)
        out[f.name] = value
    return out


def read_as(tp: Any, v: Any, loc: tuple) -> Any:
    """`v` read as the type `tp` (Optional, list, dict[str, Any], a Checked class, a scalar)."""
    origin = typing.get_origin(tp)
    if origin is Union:
        if v is None:
            return None
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
        origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [read_as(item, x, loc + (i,)) for i, x in enumerate(items(v, loc))]
    if origin is dict:
        return mapping(v, loc)
    if isinstance(tp, type) and issubclass(tp, Checked):
        return tp.read(v, loc)
    if tp is str:
        return string(v, loc, as_layout=True)
    if tp is int:
        return integer(v, loc, as_layout=True)
    if tp is float:
        return number(v, loc, as_layout=True)
    if tp is bool:
        return boolean(v, loc)
    return v


def _bounded(value: Any, raw: Any, loc: tuple, meta: Any) -> None:
    """A number's bounds, said with the bound as the field's type and the value as written."""
    if isinstance(value, float) and not math.isfinite(value):
        raise Invalid(loc, f"expected a finite number, got {_short(raw)}")
    kind = type(value)
    for name, sign, ok in (("gt", ">", lambda b: value > b), ("ge", ">=", lambda b: value >= b),
                           ("le", "<=", lambda b: value <= b)):
        bound = meta.get(name)
        if bound is not None and not ok(bound):
            raise Invalid(loc, f"expected a value {sign} {kind(bound)}, got {_short(raw)}")


# --------------------------------------------------------------------------------------------
# Written out

def to_json(v: Any) -> Any:
    """A value as JSON keeps it (as pydantic's JSON mode wrote a layout): inf and nan as None,
    dates as ISO text, bytes as their text, tuples and sets as lists, keys as text."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, (str, int)):
        return v
    if isinstance(v, Checked):
        return v.as_dict()
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return to_json(dataclasses.asdict(v))
    if isinstance(v, dict):
        return {_json_key(k): to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [to_json(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return v.decode()
    if isinstance(v, datetime.datetime) and v.utcoffset() == datetime.timedelta(0):
        return v.replace(tzinfo=None).isoformat() + "Z"
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    return v


def _json_key(k: Any) -> str:
    if isinstance(k, bool):
        return "true" if k else "false"
    if isinstance(k, tuple):
        return ",".join(_json_key(x) for x in k)
    return str(to_json(k))
