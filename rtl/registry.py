"""The catalog of RTL designs, importable without Amaranth.

Each :class:`Design` names the callable that builds its Amaranth component from a
parameter dict, and its default parameters (overridable from a YAML config or the CLI).
``mactile list``, ``mactile generate``, ``mactile sim``, ``mactile synth`` and the
report all read this one table.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Design", "DESIGNS", "get_design"]


@dataclass(frozen=True)
class Design:
    """One generatable design.

    Parameters
    ----------
    name : str
        CLI name (``"mac-int4"``).
    summary : str
        One line for ``mactile list``.
    builder : str
        ``"module:callable"``; the callable takes keyword parameters and returns an
        Amaranth ``wiring.Component`` (imported only when building).
    params : dict
        Default parameters.
    reference : str
        Paper, section and table the design reproduces.
    group : str
        Which table of a paper it belongs to (used to group reports and plots).
    """

    name: str
    summary: str
    builder: str
    params: dict[str, Any] = field(default_factory=dict)
    reference: str = ""
    group: str = ""

    def load_builder(self) -> Callable[..., Any]:
        module, _, attr = self.builder.partition(":")
        return getattr(importlib.import_module(module), attr)

    def build(self, **overrides):
        """Build the Amaranth component with the default parameters plus ``overrides``."""
        unknown = set(overrides) - set(self.params)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {sorted(unknown)}; "
                             f"known: {sorted(self.params)}")
        return self.load_builder()(**{**self.params, **overrides})


#: Every design by name. Each RTL module adds its rows here.
DESIGNS: dict[str, Design] = {}


def get_design(name: str) -> Design:
    """The design called ``name``, or a ``ValueError`` listing the known ones."""
    try:
        return DESIGNS[name]
    except KeyError:
        known = ", ".join(sorted(DESIGNS)) or "(none)"
        raise ValueError(f"unknown design {name!r}; known designs: {known}") from None
