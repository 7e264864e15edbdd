"""Golden format specs <-> plain strings, and which layer kind serves a format.

A torch custom op takes tensors and scalars only, so a golden format travels as a JSON
string of its constructor fields (:func:`spec_json`) and is rebuilt, once per process and
string, by :func:`format_from_spec`. The layer kind is read off the spec's class (the GPU
path its kernels take), never off its name.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import json

from mactile.golden import BLOCK_FORMATS, BlockFormat, IntGroup, NestedFP, NestedFP8, get_format
from mactile.golden.conventions import Convention, convention_for

__all__ = ["spec_json", "format_from_spec", "resolve_format", "layer_kind", "KINDS", "MODES",
           "default_mode", "ALIASES"]

#: Layer kinds: the GPU path a format's weights take.
KINDS = ("fp4", "nestedfp", "flexq")
#: Modes of each kind, the default first: the activation precision / kernel family.
MODES = {
    "fp4": ("w4a16", "w4a4"),      # FP16 activations (engine/GEMV) or ReSET's NVFP4 activations
    "nestedfp": ("fp16", "fp8"),   # NestedFP's two precisions, switchable per call
    "flexq": ("w6a6", "w6a8"),     # FlexQ's INT6 weights with INT6 or INT8 activations
}


def _jsonable(v):
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, tuple):
        return [_jsonable(e) for e in v]
    if isinstance(v, Convention):
        return v.differences()
    return v


def spec_json(fmt: BlockFormat) -> str:
    """The constructor fields of a golden block format as a canonical JSON string."""
    fields = {f.name: _jsonable(getattr(fmt, f.name)) for f in dataclasses.fields(fmt) if f.init}
    return json.dumps({"name": fmt.name, **fields}, sort_keys=True)


@functools.lru_cache(maxsize=None)
def format_from_spec(spec: str) -> BlockFormat:
    """Inverse of :func:`spec_json` (cached per string)."""
    d = json.loads(spec)
    cls = BLOCK_FORMATS[d.pop("name")]
    default = cls()
    kwargs = {}
    for k, v in d.items():
        ref = getattr(default, k)
        if isinstance(ref, Convention):
            kwargs[k] = convention_for(cls.name, None, **v)
        elif isinstance(ref, enum.Enum):
            kwargs[k] = type(ref)(v)
        elif isinstance(ref, tuple):
            kwargs[k] = tuple(v)
        else:
            kwargs[k] = v
    return cls(**kwargs)


#: Names of torch-level schemes that are a registry format with fixed options.
ALIASES = {"flexq": ("int-group", {"bits": 6})}


def resolve_format(format, convention=None) -> BlockFormat:
    """A golden format from a registry name (with an optional convention preset), a scheme
    of :data:`ALIASES` (``flexq``: int-group, 6 bits) or a spec."""
    if isinstance(format, BlockFormat):
        if convention is not None:
            raise ValueError("convention= applies to a format given by name; this spec already "
                             f"carries its convention ({format.describe()})")
        return format
    if not isinstance(format, str):
        raise TypeError(f"format must be a registry name or a golden BlockFormat, got {format!r}")
    name, opts = ALIASES.get(format, (format, {}))
    return get_format(name, convention=convention, **opts)


def layer_kind(fmt: BlockFormat) -> str:
    """The layer kind of a golden format: ``fp4`` (a format with GPU FP4 kernels),
    ``nestedfp`` or ``flexq``.

    Raises
    ------
    ValueError
        For a format none of the GPU paths serves (it names the ones that do).
    """
    if isinstance(fmt, NestedFP):
        return "nestedfp"
    if isinstance(fmt, IntGroup):
        if fmt.bits != 6 or fmt.block_size != 128:
            raise ValueError(f"FlexQ layers take int-group weights of 6 bits in groups of 128, got "
                             f"{fmt.describe()}")
        return "flexq"
    from mactile.gpu.formats import FP4_ENGINE_FORMATS  # noqa: PLC0415 (NumPy only)

    storage = getattr(fmt, "storage", None)
    if storage is not None and fmt.name in FP4_ENGINE_FORMATS and fmt.block_size == storage.block_size:
        return "fp4"
    raise ValueError(f"no torch layer for {fmt.describe()}: the GPU paths take "
                     f"{', '.join(FP4_ENGINE_FORMATS)} (block sizes of their kernels), nestedfp, "
                     "nestedfp8 and int-group (bits 6, block 128)")


def default_mode(fmt: BlockFormat) -> str:
    """The mode a layer of ``fmt`` starts in (NestedFP8 specs start in FP8 mode)."""
    kind = layer_kind(fmt)
    if isinstance(fmt, NestedFP8):
        return "fp8"
    return MODES[kind][0]
