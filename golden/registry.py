"""Every block format by name, and :func:`get_format` to build one from options."""
from __future__ import annotations

from .block import BlockFormat
from .conventions import OPTIONS as CONVENTION_OPTIONS
from .conventions import convention_for
from .dialect import DialectFP4, DialectSelect
from .fp4blocks import MXFP4, NVFP4, RaZeR, RaZeRAct
from .intgroup import IntGroup
from .mx import MX_CLASSES
from .nestedfp import NestedFP, NestedFP8
from .razer_g128 import RaZeRG128

__all__ = ["BLOCK_FORMATS", "get_format"]

#: Block-format classes by registry name.
BLOCK_FORMATS: dict[str, type[BlockFormat]] = {
    cls.name: cls for cls in (NVFP4, MXFP4, RaZeR, RaZeRAct, RaZeRG128, DialectFP4,
                              IntGroup, NestedFP, NestedFP8)
}
#: The OCP MX family's generic quantizers, one per storage entry (:mod:`.mx`).
BLOCK_FORMATS.update(MX_CLASSES)


def get_format(name: str, *, block_size: int | None = None,
               special_values: tuple[float, ...] | None = None,
               select: str | None = None, bits: int | None = None,
               convention: str | None = None, **options) -> BlockFormat:
    """Build a block-format spec from a name and the CLI's options.

    ``convention`` names a preset of :mod:`.conventions` (``ocp``, ``torchao``,
    ``microxcaling``) and ``options`` override its single options (``element_ties="away"``);
    only ``nvfp4`` and ``mxfp4`` take them.

    Raises
    ------
    ValueError
        For an unknown name, or an option the format does not take.

    Examples
    --------
    >>> get_format("razer", special_values=(5, 7)).describe()
    'razer(block_size=16, special_values=(5.0, 7.0))'
    >>> get_format("nvfp4", convention="torchao", tensor_scale=False).describe()
    "nvfp4(block_size=16, convention='torchao+tensor_scale=False')"
    """
    try:
        cls = BLOCK_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown format {name!r}; known formats: "
                         f"{', '.join(sorted(BLOCK_FORMATS))}") from None
    kwargs: dict = {}
    if block_size is not None:
        if cls in (NestedFP, NestedFP8):
            raise ValueError(f"{name} has no blocks (--block does not apply)")
        kwargs["block_size"] = block_size  # the format checks it (an int, in range)
    if special_values is not None:
        if isinstance(special_values, (str, bytes)) or not hasattr(special_values, "__iter__"):
            raise TypeError(f"special_values must be a sequence of numbers, got "
                            f"{special_values!r}")
        if isinstance(special_values, (set, frozenset, dict)):  # which is A, which is B?
            raise TypeError(f"special_values must be an ordered pair (a tuple or list), got "
                            f"a {type(special_values).__name__}: {special_values!r}")
        vals = tuple(special_values)
        if cls in (RaZeR, RaZeRG128):
            if len(vals) != 2:
                raise ValueError(f"{name} takes two special magnitudes A,B; got {len(vals)}")
            kwargs["special_values"] = vals
        elif cls is RaZeRAct:
            if len(vals) != 1:
                raise ValueError(f"razer-act takes one special magnitude A; got {len(vals)}")
            kwargs["special_value"] = vals[0]
        else:
            raise ValueError(f"{name} has no special values (only razer, razer-g128 and razer-act do)")
    if select is not None:
        if cls is not DialectFP4:
            raise ValueError(f"{name} has no dialect selection (only dialectfp4 does)")
        try:
            kwargs["select"] = DialectSelect(select)
        except ValueError:
            raise ValueError(f"unknown selection {select!r}; choose "
                             f"{' or '.join(s.value for s in DialectSelect)}") from None
    if bits is not None:
        if cls is not IntGroup:
            raise ValueError(f"{name} has a fixed element width (--bits applies to int-group)")
        kwargs["bits"] = bits
    if convention is not None or options:
        conv = convention_for(name, convention, **options)
        if name in CONVENTION_OPTIONS:
            kwargs["convention"] = conv
    return cls(**kwargs)
