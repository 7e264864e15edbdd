"""Argument checks shared by the constructors of the golden specs (and the RTL builders).

Every spec validates its fields when it is made, so a wrong argument fails at once with a
message naming the spec, the argument and the value (``NVFP4(block_size=16.5)`` once got as
far as a NumPy reshape before failing with an unrelated TypeError). Types are refused with
:class:`TypeError`, values out of range with :class:`ValueError`. A ``bool`` is not taken
for an integer, nor an integral ``float``: ``bits=6.0`` is as wrong as ``bits=6.5``.
NumPy integer and floating scalars are accepted and returned as Python ``int``/``float``.
"""
from __future__ import annotations

import enum
import math
import numbers

__all__ = ["integer", "real", "boolean", "choice", "reals"]


def _show(value) -> str:
    return f"{value!r} ({type(value).__name__})"


def _who(owner: str) -> str:
    """The message prefix: ``"nvfp4: "``, or nothing for an empty owner (the caller
    names it, e.g. the CLI's design name)."""
    return f"{owner}: " if owner else ""


def integer(owner: str, name: str, value, *, lo: int | None = None,
            hi: int | None = None) -> int:
    """``value`` as an ``int`` in ``[lo, hi]``.

    Examples
    --------
    >>> integer("nvfp4", "block_size", 16, lo=1)
    16
    >>> integer("nvfp4", "block_size", 16.5, lo=1)
    Traceback (most recent call last):
    ...
    TypeError: nvfp4: block_size must be an integer, got 16.5 (float)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{_who(owner)}{name} must be an integer, got {_show(value)}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{_who(owner)}{name} must {_range(lo, hi)}, got {v}")
    return v


def real(owner: str, name: str, value, *, lo: float | None = None, hi: float | None = None,
         lo_open: bool = False, hi_open: bool = False) -> float:
    """``value`` as a finite ``float`` in the interval (open or closed at each end)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{_who(owner)}{name} must be a real number, got {_show(value)}")
    v = float(value)
    bad = not math.isfinite(v)
    if lo is not None:
        bad |= v <= lo if lo_open else v < lo
    if hi is not None:
        bad |= v >= hi if hi_open else v > hi
    if bad:
        where = _range(lo, hi, lo_open, hi_open) if (lo is not None or hi is not None) \
            else "be finite"
        raise ValueError(f"{_who(owner)}{name} must {where}, got {v}")
    return v


def reals(owner: str, name: str, value, *, count: int | None = None) -> tuple[float, ...]:
    """A sequence of real numbers (not a string) as a tuple of floats, of ``count`` items."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{_who(owner)}{name} must be a sequence of numbers, got {_show(value)}")
    if isinstance(value, (set, frozenset, dict)):  # unordered: which value is which is lost
        raise TypeError(f"{_who(owner)}{name} must be an ordered sequence (a list or tuple), "
                        f"got a {type(value).__name__}: {_show(value)}")
    items = tuple(value)
    if count is not None and len(items) != count:
        raise ValueError(f"{_who(owner)}{name} needs exactly {count} values, got {len(items)}: "
                         f"{items!r}")
    return tuple(real(owner, f"{name}[{i}]", v) for i, v in enumerate(items))


def boolean(owner: str, name: str, value) -> bool:
    """``value`` as a ``bool`` (NumPy booleans accepted; ``0``/``1`` are not)."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise TypeError(f"{_who(owner)}{name} must be True or False, got {_show(value)}")
    return bool(value)


def choice(owner: str, name: str, value, enum_cls: type[enum.Enum]):
    """``value`` as a member of ``enum_cls`` (a member, or one of the members' values)."""
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(value)
    except (ValueError, TypeError):
        known = ", ".join(repr(m.value) for m in enum_cls)
        raise ValueError(f"{_who(owner)}{name} must be one of {known}, got {value!r}") from None


def _range(lo, hi, lo_open: bool = False, hi_open: bool = False) -> str:
    """``"lie in [2, 8]"``, ``"be >= 1"``: what a value must do, for messages."""
    if lo is not None and hi is not None:
        return f"lie in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f"be {'>' if lo_open else '>='} {lo}"
    return f"be {'<' if hi_open else '<='} {hi}"
