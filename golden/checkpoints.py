"""NVFP4 and MXFP4 checkpoints as the ecosystem ships them: read and written bit for bit.

Released 4-bit models are safetensors files (one, or shards with an index JSON) in a few
layouts. Each layout is one frozen :class:`Layout` here, every open choice a named option:
tensor names, the order of the two nibbles in a byte, the scale's dtype and shape, which
way the global scale goes, padding, and the order of operations of the layout's own
dequantization with its final rounding to the model's dtype (docs/checkpoints.md has them
side by side).

``compressed-tensors-nvfp4``
    compressed-tensors ``nvfp4-pack-quantized`` (llm-compressor): ``<layer>.weight_packed``
    U8 ``[N, K/2]``, ``<layer>.weight_scale`` F8_E4M3 ``[N, K/16]``,
    ``<layer>.weight_global_scale`` F32 ``[1]`` holding ``g = 448 * 6 / amax``, the inverse
    of the golden tensor scale ``T``; dequantized as ``bf16(fl32(q * fl32(s / g)))``.
``compressed-tensors-mxfp4``
    ``mxfp4-pack-quantized``: ``weight_packed`` and ``weight_scale`` (U8, E8M0 ``e + 127``).
``modelopt-nvfp4``
    NVIDIA ModelOpt's export: ``<layer>.weight`` U8 ``[N, K/2]``, ``weight_scale`` F8_E4M3,
    ``weight_scale_2`` F32 scalar ``T = amax / (448 * 6)``, ``input_scale`` F32 scalar;
    dequantized as ``dtype(fl32(q * fl32(s * T)))``.
``gpt-oss-mxfp4``
    gpt-oss / transformers: ``<name>_blocks`` U8 ``[..., N, K/32, 16]``, ``<name>_scales`` U8
    ``[..., N, K/32]``; dequantized as ``bf16(fl32(q * 2**(e - 127)))`` and, for the expert
    tensors ``[E, N, K]``, returned transposed ``[E, K, N]``.
``mactile``
    mactile's own layout for every FP4 block format (RaZeR and the rest), so that
    ``mactile convert`` output loads back.

A quantized layer reads into a golden :class:`~.block.Quantized` straight from the bytes
(codes unpacked from nibbles, scale bytes taken as the format's scale codes): no float
value is formed, so :func:`mactile.gpu.packing.pack_w4a16` packs a checkpoint's weights as
it packs the golden quantizer's. Every tensor is read on its own (memory bounded by the
largest tensor) and every file written atomically (:mod:`.fileio`).

Needs NumPy only: the safetensors container is parsed here (the ``safetensors`` package's
NumPy API has no F8_E4M3 or BF16 dtype).
"""
from __future__ import annotations

import enum
import json
import math
import os
import shutil
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from .block import Quantized
from .elements import E8M0, FP4_E2M1, FP8_E4M3
from .fp4blocks import MXFP4, NVFP4

__all__ = [
    "CheckpointError", "NibbleOrder", "GlobalScale", "Padding", "DequantOrder", "ModelDtype",
    "NegativeZeroCode",
    "Layout", "LAYOUTS", "TensorEntry", "SafetensorsFile", "Checkpoint", "LayerWeight",
    "PlainTensor", "read_layer", "layer_tensors", "PackedLayer", "read_packed_layer",
    "packed_layer_tensors", "layer_specs", "layer_from_quantized", "dequantize_layer",
    "requant_error", "write_safetensors", "PlannedFile", "write_planned", "roundtrip_files", "detect_layout", "bf16_to_float32",
    "float32_to_bf16", "MAX_HEADER_BYTES", "INDEX_NAME",
]

#: safetensors refuses headers above 100 MB (its ``MAX_HEADER_SIZE``); so do we.
MAX_HEADER_BYTES = 100_000_000
#: The index of a sharded checkpoint (transformers' ``SAFE_WEIGHTS_INDEX_NAME``).
INDEX_NAME = "model.safetensors.index.json"

#: safetensors dtypes: NumPy storage dtype (raw bits for the float types NumPy lacks).
DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
    "F8_E5M2": np.dtype(np.uint8), "F8_E4M3": np.dtype(np.uint8), "F8_E8M0": np.dtype(np.uint8),
    "I16": np.dtype("<i2"), "U16": np.dtype("<u2"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "I32": np.dtype("<i4"), "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
}
#: The Rust crate's ``Dtype`` declaration order: its writer sorts tensors by descending
#: dtype, then by name (``safetensors::tensor::prepare``); :func:`write_safetensors` too.
_RUST_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
               "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"]
_F32 = np.float32


class CheckpointError(ValueError):
    """A checkpoint that cannot be read as claimed (the message names file, tensor and
    problem, in one line)."""


# ============================================================ the safetensors container
@dataclass(frozen=True)
class TensorEntry:
    """One header entry: ``begin``/``end`` are offsets into the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def _bad(path, what: str) -> CheckpointError:
    return CheckpointError(f"{os.fspath(path)}: {what}")


def _stat_input(path: Path, what: str = "checkpoint") -> os.stat_result:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckpointError(f"{what} {str(path)!r} does not exist") from None
    except OSError as e:
        raise CheckpointError(f"cannot read {str(path)!r}: {(e.strerror or str(e)).lower()}") from None
    return st


class SafetensorsFile:
    """A parsed, checked safetensors file; :meth:`read` loads one tensor at a time.

    Checked on opening (each refused with the file, the tensor and the problem): a file
    shorter than its 8-byte header length, a header longer than the file or than
    :data:`MAX_HEADER_BYTES`, a header that is not a JSON object of entries, an unknown
    dtype, a bad shape, offsets that disagree with shape and dtype, data beyond the end of
    the file (truncated), overlapping tensors, and ``__metadata__`` that is not strings.
    """

    def __init__(self, path):
        self.path = Path(os.fspath(path))
        st = _stat_input(self.path, "safetensors file")
        if not stat.S_ISREG(st.st_mode):
            raise _bad(self.path, "not a regular file")
        self.size = st.st_size
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(8)
                if len(head) < 8:
                    raise _bad(self.path, f"truncated: {len(head)} bytes, but a safetensors file "
                                          "starts with an 8-byte header length")
                (n,) = struct.unpack("<Q", head)
                if n > MAX_HEADER_BYTES:
                    raise _bad(self.path, f"header claims {n} bytes, more than the "
                                          f"{MAX_HEADER_BYTES} safetensors allows (not a "
                                          "safetensors file?)")
                if n > self.size - 8:
                    raise _bad(self.path, f"truncated: the header claims {n} bytes but the file "
                                          f"holds {self.size - 8} after its length")
                raw = fh.read(n)
        except PermissionError:
            raise _bad(self.path, "permission denied") from None
        self.header_bytes = raw
        self.data_start = 8 + n
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise _bad(self.path, f"header is not valid JSON ({str(e).splitlines()[0]})") from None
        if not isinstance(header, dict):
            raise _bad(self.path, f"header is a JSON {type(header).__name__}, not an object")
        meta = header.pop("__metadata__", None)
        if meta is not None and (not isinstance(meta, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in meta.items())):
            raise _bad(self.path, "__metadata__ must map strings to strings")
        self.metadata: dict[str, str] | None = meta
        self.entries: dict[str, TensorEntry] = {}
        data_len = self.size - self.data_start
        for name, info in header.items():
            self.entries[name] = self._entry(name, info, data_len)
        spans = sorted((e.begin, e.end, e.name) for e in self.entries.values() if e.nbytes)
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise _bad(self.path, f"tensors {n0!r} and {n1!r} overlap (bytes {b1}..{e0})")

    def _entry(self, name, info, data_len) -> TensorEntry:
        where = f"tensor {name!r}"
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise _bad(self.path, f"{where}: header entry must hold dtype, shape and data_offsets")
        dtype, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPES:
            known = ", ".join(DTYPES)
            raise _bad(self.path, f"{where}: unknown or unsupported dtype {dtype!r} (known: {known})")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                  and d >= 0 for d in shape):
            raise _bad(self.path, f"{where}: shape must be a list of non-negative integers, "
                                  f"got {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(
                isinstance(o, int) and not isinstance(o, bool) for o in offs)
                or not 0 <= offs[0] <= offs[1]):
            raise _bad(self.path, f"{where}: data_offsets must be [begin, end] with "
                                  f"0 <= begin <= end, got {offs!r}")
        need = math.prod(shape) * DTYPES[dtype].itemsize
        if offs[1] - offs[0] != need:
            raise _bad(self.path, f"{where}: shape {shape} of {dtype} needs {need} bytes but "
                                  f"data_offsets {offs} span {offs[1] - offs[0]}")
        if offs[1] > data_len:
            raise _bad(self.path, f"{where}: truncated: its data ends at byte {offs[1]} of the "
                                  f"data section but the file holds {data_len}")
        return TensorEntry(name, dtype, tuple(shape), offs[0], offs[1])

    def read(self, name: str) -> np.ndarray:
        """The tensor's bytes as its NumPy storage dtype (:data:`DTYPES`), shaped."""
        e = self.entries[name]
        dt = DTYPES[e.dtype]
        with open(self.path, "rb") as fh:
            fh.seek(self.data_start + e.begin)
            buf = fh.read(e.nbytes)
        if len(buf) != e.nbytes:
            raise _bad(self.path, f"tensor {name!r}: truncated while reading (the file shrank?)")
        return np.frombuffer(buf, dtype=dt).reshape(e.shape)


def _header_json(entries: list[tuple[str, str, tuple[int, ...], int, int]],
                 metadata: dict[str, str] | None) -> bytes:
    """The header as the Rust writer serializes it (serde_json, compact), padded with
    spaces to a multiple of 8 bytes."""
    parts = []
    if metadata is not None:
        parts.append('"__metadata__":' + json.dumps(metadata, separators=(",", ":"),
                                                    ensure_ascii=False))
    for name, dtype, shape, b, e in entries:
        parts.append(json.dumps(name, ensure_ascii=False) + ":" + json.dumps(
            {"dtype": dtype, "shape": list(shape), "data_offsets": [b, e]}, separators=(",", ":")))
    raw = ("{" + ",".join(parts) + "}").encode("utf-8")
    return raw + b" " * ((8 - len(raw) % 8) % 8)


def canonical_order(specs: Iterable[tuple[str, str]]) -> list[str]:
    """Names in the Rust writer's order: descending dtype, then name."""
    return [n for n, d in sorted(specs, key=lambda nd: (-_RUST_ORDER.index(nd[1]), nd[0]))]


def write_safetensors(path, tensors: list[tuple[str, str, tuple[int, ...], Callable[[], np.ndarray]]],
                      metadata: dict[str, str] | None = None, *, order: list[str] | None = None) -> int:
    """Write a safetensors file, producing each tensor only when it is written.

    Parameters
    ----------
    tensors : list of ``(name, dtype, shape, produce)``
        ``produce()`` returns the tensor in its storage dtype (:data:`DTYPES`); it is called
        once, in file order, so at most one tensor is held at a time.
    order : list of names, optional
        File order (a file read back keeps its own); default the Rust writer's.

    Returns the bytes written. ``path`` is written as given: callers wrap it in
    :func:`~.fileio.atomic_outputs`.
    """
    by_name = {t[0]: t for t in tensors}
    if len(by_name) != len(tensors):
        raise CheckpointError("two tensors of the same name")
    names = order if order is not None else canonical_order((t[0], t[1]) for t in tensors)
    if sorted(names) != sorted(by_name):
        raise CheckpointError("write order does not list every tensor once")
    entries, off = [], 0
    for n in names:
        _, dtype, shape, _ = by_name[n]
        nb = math.prod(shape) * DTYPES[dtype].itemsize
        entries.append((n, dtype, tuple(int(d) for d in shape), off, off + nb))
        off += nb
    head = _header_json(entries, metadata)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)))
        fh.write(head)
        for n, dtype, shape, b, e in entries:
            a = np.asarray(by_name[n][3]())
            if a.dtype != DTYPES[dtype] or a.shape != shape:
                raise CheckpointError(f"tensor {n!r}: produced {a.dtype} {a.shape}, declared "
                                      f"{dtype} {shape}")
            if a.nbytes:  # the array's own bytes, not a copy
                fh.write(memoryview(np.ascontiguousarray(a)).cast("B"))
    return 8 + len(head) + off


# ============================================================ layouts
class NibbleOrder(enum.Enum):
    """Which nibble of a byte holds the even element: ``LOW_FIRST`` (element ``2j`` in bits
    3..0, ``2j + 1`` in bits 7..4: compressed-tensors, ModelOpt, gpt-oss) or ``HIGH_FIRST``."""

    LOW_FIRST = "low-first"
    HIGH_FIRST = "high-first"


class GlobalScale(enum.Enum):
    """The NVFP4 global scale as stored: ``DIVIDE`` ``g = 1 / T`` (``w = q * s / g``:
    compressed-tensors, ``g = 448 * 6 / amax``), ``MULTIPLY`` ``T`` itself (ModelOpt's
    ``weight_scale_2 = amax / (448 * 6)``, the golden tensor scale), or ``NONE`` (MX)."""

    DIVIDE = "divide"
    MULTIPLY = "multiply"
    NONE = "none"


class Padding(enum.Enum):
    """A last axis ``K`` that is not a multiple of the block: ``PARTIAL`` the stored codes
    hold ``K`` elements and the scales ``ceil(K / B)`` blocks, the last one partial
    (compressed-tensors' shapes; read padded with zero codes, written cropped);
    ``STORED`` the stored tensors are zero-padded to whole blocks (ModelOpt pads before
    quantizing, gpt-oss stores whole blocks): ``K`` is then the padded length."""

    PARTIAL = "partial"
    STORED = "stored"


class DequantOrder(enum.Enum):
    """The layout library's dequantization, one FP32 rounding per operation, then one
    round-to-nearest-even to the model dtype.

    ``SCALE_DIV_FIRST``  ``fl32(q * fl32(s / g))`` (compressed-tensors ``_dequantize``:
    ``scale / global_scale`` first, in FP32 by type promotion);
    ``SCALE_MUL_FIRST``  ``fl32(q * fl32(s * T))`` (ModelOpt ``NVFP4QTensor.dequantize``);
    ``POW2``  ``fl32(q * fl32(2**(e - 127)))`` (transformers' ``torch.ldexp``; exact but
    where it overflows: code 255 gives ``2**128 = inf``, so ``0 * inf = NaN``);
    ``EXACT``  the golden dequantization (float64 exact products) rounded to FP32, then to
    the model dtype (the ``mactile`` layout).
    """

    SCALE_DIV_FIRST = "scale-div-first"
    SCALE_MUL_FIRST = "scale-mul-first"
    POW2 = "pow2"
    EXACT = "exact"


class NegativeZeroCode(enum.Enum):
    """What the FP4 code ``0b1000`` dequantizes to: ``NEGATIVE`` -0.0 (IEEE: the sign bit
    applied; compressed-tensors, transformers) or ``POSITIVE`` +0.0 (ModelOpt's
    ``e2m1_values`` table holds 0 at index 8). Equal as numbers, different BF16 bits."""

    NEGATIVE = "negative"
    POSITIVE = "positive"


class ModelDtype(enum.Enum):
    """The dtype a dequantized weight is rounded to (nearest even; torch's ``.to``)."""

    BF16 = "BF16"
    F16 = "F16"
    F32 = "F32"


@dataclass(frozen=True, kw_only=True)
class Layout:
    """One checkpoint layout: names, storage and the library's own dequantization.

    A layer ``base`` stores its codes in ``base + separator + codes_suffix`` and so on.
    """

    name: str
    library: str
    format_name: str  # golden block format of the layer ("nvfp4", "mxfp4"; "mactile": any)
    block_size: int
    separator: str
    codes_suffix: str
    scale_suffix: str
    global_suffix: str | None
    #: Tensors of the layer carried along as they are (activation scales).
    carried_suffixes: tuple[str, ...] = ()
    codes_dtype: str = "U8"
    scale_dtype: str = "F8_E4M3"
    global_shape: tuple[int, ...] = ()
    #: Codes stored as ``[..., K/B, B/2]`` (gpt-oss) instead of ``[..., K/2]``.
    grouped_codes: bool = False
    nibble_order: NibbleOrder = NibbleOrder.LOW_FIRST
    global_scale: GlobalScale = GlobalScale.NONE
    padding: Padding = Padding.PARTIAL
    dequantize: DequantOrder = DequantOrder.EXACT
    model_dtype: ModelDtype = ModelDtype.BF16
    negative_zero: NegativeZeroCode = NegativeZeroCode.NEGATIVE
    #: The dequantized weight of an ``[E, N, K]`` tensor is returned ``[E, K, N]``.
    transpose_output: bool = False
    #: Block scale the library's quantizer writes for an all-zero block (documentation:
    #: the reader takes whatever is stored).
    zero_block_scale: str = ""
    #: ``quantization_config`` markers in config.json that name this layout.
    config_marker: tuple[str, str] = ("", "")
    reference: str = ""

    def tensor_name(self, base: str, suffix: str) -> str:
        return base + self.separator + suffix

    @property
    def suffixes(self) -> tuple[str, ...]:
        out = (self.codes_suffix, self.scale_suffix)
        if self.global_suffix:
            out += (self.global_suffix,)
        return out


LAYOUTS: dict[str, Layout] = {l.name: l for l in (
    Layout(name="compressed-tensors-nvfp4", library="compressed-tensors 0.20 (nvfp4-pack-quantized)",
           format_name="nvfp4", block_size=16, separator=".", codes_suffix="weight_packed",
           scale_suffix="weight_scale", global_suffix="weight_global_scale",
           carried_suffixes=("input_global_scale",), scale_dtype="F8_E4M3", global_shape=(1,),
           global_scale=GlobalScale.DIVIDE, padding=Padding.PARTIAL,
           dequantize=DequantOrder.SCALE_DIV_FIRST, model_dtype=ModelDtype.BF16,
           zero_block_scale="0.125 (E4M3 0x20: calculate_qparams replaces a zero scale by its eps)",
           config_marker=("compressed-tensors", "nvfp4-pack-quantized"),
           reference="compressed_tensors/compressors/nvfp4/{base,helpers}.py, "
                     "quantization/lifecycle/forward_helpers.py _dequantize"),
    Layout(name="compressed-tensors-mxfp4", library="compressed-tensors 0.20 (mxfp4-pack-quantized)",
           format_name="mxfp4", block_size=32, separator=".", codes_suffix="weight_packed",
           scale_suffix="weight_scale", global_suffix=None,
           carried_suffixes=("input_global_scale",), scale_dtype="U8",
           dequantize=DequantOrder.POW2, model_dtype=ModelDtype.BF16,
           config_marker=("compressed-tensors", "mxfp4-pack-quantized"),
           reference="compressed_tensors/compressors/mxfp4/base.py, compressors/mx_utils.py"),
    Layout(name="modelopt-nvfp4", library="NVIDIA ModelOpt (NVFP4 export)",
           format_name="nvfp4", block_size=16, separator=".", codes_suffix="weight",
           scale_suffix="weight_scale", global_suffix="weight_scale_2",
           carried_suffixes=("input_scale",), scale_dtype="F8_E4M3", global_shape=(),
           global_scale=GlobalScale.MULTIPLY, padding=Padding.STORED,
           dequantize=DequantOrder.SCALE_MUL_FIRST, model_dtype=ModelDtype.BF16,
           negative_zero=NegativeZeroCode.POSITIVE,
           zero_block_scale="1.0 (E4M3 0x38: get_weights_scaling_factor sets zero scales to 1)",
           config_marker=("modelopt", "NVFP4"),
           reference="modelopt/torch/quantization/qtensor/nvfp4_tensor.py"),
    Layout(name="gpt-oss-mxfp4", library="gpt-oss / transformers (integrations/mxfp4.py)",
           format_name="mxfp4", block_size=32, separator="_", codes_suffix="blocks",
           scale_suffix="scales", global_suffix=None, scale_dtype="U8", grouped_codes=True,
           padding=Padding.STORED, dequantize=DequantOrder.POW2, model_dtype=ModelDtype.BF16,
           transpose_output=True, config_marker=("mxfp4", ""),
           reference="transformers/integrations/mxfp4.py convert_moe_packed_tensors"),
    Layout(name="mactile", library="mactile (any FP4 block format)", format_name="",
           block_size=0, separator=".", codes_suffix="mactile_codes",
           scale_suffix="mactile_scales", global_suffix="mactile_tensor_scale",
           scale_dtype="U8", global_shape=(1,), global_scale=GlobalScale.MULTIPLY,
           padding=Padding.PARTIAL, dequantize=DequantOrder.EXACT, model_dtype=ModelDtype.BF16,
           config_marker=("mactile", ""), reference="golden/checkpoints.py"),
)}

#: __metadata__ key of the mactile layout: JSON ``{base: {format, block_size, ...}}``.
MACTILE_META_KEY = "mactile.layers"


# ============================================================ bit helpers
def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """BF16 bit patterns (uint16) as float32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint32) << np.uint32(16)).view(np.float32)


def float32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Float32 to BF16 bits, round to nearest even (torch's conversion; NaN -> 0x7FC0)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    out = r.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = np.uint16(0x7FC0) | ((b[nan] >> np.uint32(16)) & np.uint32(0x8000)).astype(np.uint16)
    return out


def _round_to(y32: np.ndarray, dtype: ModelDtype) -> np.ndarray:
    """FP32 values rounded to the model dtype, in its storage dtype (BF16 as uint16)."""
    if dtype is ModelDtype.BF16:
        return float32_to_bf16(y32)
    if dtype is ModelDtype.F16:
        with np.errstate(over="ignore"):
            return y32.astype("<f2")
    return y32.astype("<f4")


def model_values(stored: np.ndarray, dtype: ModelDtype) -> np.ndarray:
    """Stored model-dtype values as float32 (exact)."""
    if dtype is ModelDtype.BF16:
        return bf16_to_float32(stored)
    return np.asarray(stored, dtype=np.float32)


def _unpack(packed: np.ndarray, order: NibbleOrder) -> np.ndarray:
    lo, hi = packed & np.uint8(0x0F), packed >> np.uint8(4)
    if order is NibbleOrder.HIGH_FIRST:
        lo, hi = hi, lo
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2], out[..., 1::2] = lo, hi
    return out


def _pack(codes: np.ndarray, order: NibbleOrder) -> np.ndarray:
    c = np.asarray(codes, dtype=np.uint8)
    first, second = c[..., 0::2], c[..., 1::2]
    if order is NibbleOrder.HIGH_FIRST:
        first, second = second, first
    return (first | (second << np.uint8(4))).astype(np.uint8)


# ============================================================ layers
@dataclass(frozen=True, eq=False)
class LayerWeight:
    """A quantized layer of a checkpoint: the golden ``Quantized`` and what it was read from.

    Attributes
    ----------
    base : str
        The layer's name (``model.layers.0.mlp.up_proj``; gpt-oss ``...experts.down_proj``).
    quantized : Quantized
        Codes ``[..., K_pad/B, B]`` and scale codes as stored; for a ``DIVIDE`` layout the
        tensor scale is ``T = fl32(1 / g)``.
    shape : tuple
        The stored (logical) shape ``[..., K]``, before padding to whole blocks.
    stored_global : float32 or None
        The global scale exactly as stored (``g``, or ``T``), written back unchanged.
    carried : dict
        The layer's other tensors (activation scales): name -> (dtype, array).
    """

    base: str
    layout: Layout
    quantized: Quantized
    shape: tuple[int, ...]
    stored_global: np.float32 | None = None
    carried: dict = field(default_factory=dict)

    @property
    def format(self):
        return self.quantized.format

    def tensor_names(self) -> list[str]:
        """The stored tensors of this layer (codes, scales, global scale if any, carried)."""
        lay = self.layout
        names = [lay.tensor_name(self.base, lay.codes_suffix), lay.tensor_name(self.base, lay.scale_suffix)]
        if lay.global_suffix and self.quantized.tensor_scale is not None:
            names.append(lay.tensor_name(self.base, lay.global_suffix))
        return names + list(self.carried)

    def select(self, *index: int) -> Quantized:
        """The 2-D ``[N, K_pad]`` weight at leading ``index`` (an expert of ``[E, N, K]``),
        as a golden ``Quantized`` sharing the codes (for :func:`~mactile.gpu.packing.pack_w4a16`)."""
        q = self.quantized
        if len(index) != len(q.shape) - 2:
            raise ValueError(f"layer {self.base!r} of shape {list(self.shape)} takes "
                             f"{len(q.shape) - 2} leading indices, got {len(index)}")
        return Quantized(format=q.format, shape=tuple(q.shape[-2:]), codes=q.codes[index],
                         scales=q.scales[index], tensor_scale=q.tensor_scale)


@dataclass(frozen=True)
class PlainTensor:
    """A tensor that is not part of a quantized layer (embeddings, norms, biases)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    read: Callable[[], np.ndarray]


def _mactile_format(spec: dict):
    from .registry import get_format

    kw = {"block_size": spec.get("block_size")}
    if spec.get("special_values") is not None:
        kw["special_values"] = tuple(spec["special_values"])
    return get_format(spec["format"], **kw)


@dataclass(frozen=True, eq=False)
class PackedLayer:
    """A quantized layer as stored, checked as :func:`read_layer` checks it, before its
    codes are unpacked: ``packed`` holds the code bytes in the layout's nibble order and
    shape, ``scales`` the scale words ``[..., n_blocks]``; the other attributes are those
    of :class:`LayerWeight` (``shape`` the logical ``[..., K]``)."""

    base: str
    layout: Layout
    format: Any
    packed: np.ndarray
    scales: np.ndarray
    tensor_scale: np.float32 | None
    shape: tuple[int, ...]
    n_blocks: int
    stored_global: np.float32 | None = None
    carried: dict = field(default_factory=dict)

    def unpacked(self) -> LayerWeight:
        """The :class:`LayerWeight` (one code per byte, the last block zero-padded)."""
        fmt, bs = self.format, self.format.block_size
        lead, k = tuple(self.shape[:-1]), self.shape[-1]
        codes = _unpack(self.packed, self.layout.nibble_order).reshape(lead + (k,))
        kp = self.n_blocks * bs
        if kp != k:  # a partial last block: zero codes (+0) after the stored elements
            pad = np.zeros(lead + (kp,), dtype=np.uint8)
            pad[..., :k] = codes
            codes = pad
        q = Quantized(format=fmt, shape=lead + (kp,),
                      codes=codes.reshape(lead + (self.n_blocks, bs)),
                      scales=self.scales, tensor_scale=self.tensor_scale)
        return LayerWeight(base=self.base, layout=self.layout, quantized=q, shape=tuple(self.shape),
                           stored_global=self.stored_global, carried=self.carried)


def read_layer(base: str, layout: Layout, fetch: Callable[[str], tuple[TensorEntry, Callable]],
               where: str, mactile_spec: dict | None = None) -> LayerWeight:
    """Read one quantized layer into golden form, checking every tensor against the others.

    ``fetch(name)`` returns ``(entry, read)`` or raises KeyError; ``where`` names the file in
    messages.
    """
    return read_packed_layer(base, layout, fetch, where, mactile_spec).unpacked()


def read_packed_layer(base: str, layout: Layout,
                      fetch: Callable[[str], tuple[TensorEntry, Callable]], where: str,
                      mactile_spec: dict | None = None) -> PackedLayer:
    """:func:`read_layer`'s reading and checks, the codes left packed as stored.
    """
    def need(suffix):
        name = layout.tensor_name(base, suffix)
        try:
            return name, fetch(name)
        except KeyError:
            raise CheckpointError(f"{where}: layer {base!r} ({layout.name}) has no tensor "
                                  f"{name!r}") from None

    if layout.name == "mactile":
        if mactile_spec is None:
            raise CheckpointError(f"{where}: layer {base!r}: no entry in __metadata__ "
                                  f"{MACTILE_META_KEY!r}")
        try:
            fmt = _mactile_format(mactile_spec)
        except (ValueError, TypeError, KeyError) as e:
            raise CheckpointError(f"{where}: layer {base!r}: bad format in __metadata__: {e}") from None
        bs = fmt.block_size
        scale_dtype = {1: "U8", 2: "U16"}[fmt.scale_dtype.itemsize]
    else:
        fmt = NVFP4() if layout.format_name == "nvfp4" else MXFP4()
        bs, scale_dtype = layout.block_size, layout.scale_dtype
    cname, (centry, cread) = need(layout.codes_suffix)
    sname, (sentry, sread) = need(layout.scale_suffix)
    if centry.dtype != layout.codes_dtype:
        raise CheckpointError(f"{where}: tensor {cname!r}: dtype {centry.dtype}, but {layout.name} "
                              f"stores packed FP4 codes as {layout.codes_dtype}")
    if sentry.dtype != scale_dtype:
        raise CheckpointError(f"{where}: tensor {sname!r}: dtype {sentry.dtype}, but {layout.name} "
                              f"stores {fmt.name} block scales as {scale_dtype}")
    cs = centry.shape
    if layout.grouped_codes:
        if len(cs) < 3 or cs[-1] != bs // 2:
            raise CheckpointError(f"{where}: tensor {cname!r}: shape {list(cs)}, but {layout.name} "
                                  f"stores codes as [..., K/{bs}, {bs // 2}]")
        lead, n_blocks, k = cs[:-2], cs[-2], cs[-2] * bs
    else:
        if len(cs) < 1 or cs[-1] == 0:
            raise CheckpointError(f"{where}: tensor {cname!r}: shape {list(cs)} holds no codes")
        lead, k = cs[:-1], cs[-1] * 2
        n_blocks = -(-k // bs)
        if layout.padding is Padding.STORED and k % bs:
            raise CheckpointError(f"{where}: tensor {cname!r}: {k} codes per row, not a multiple "
                                  f"of the block size {bs} ({layout.name} stores whole blocks)")
    want = tuple(lead) + (n_blocks,)
    if sentry.shape != want:
        raise CheckpointError(f"{where}: tensor {sname!r}: shape {list(sentry.shape)} disagrees "
                              f"with {cname!r} {list(cs)}: {k} codes per row need "
                              f"{n_blocks} scales of {bs} ({list(want)})")
    if math.prod(lead) == 0:
        raise CheckpointError(f"{where}: tensor {cname!r}: shape {list(cs)} holds no rows")
    tensor_scale = stored = None
    needs_global = bool(fmt.storage is not None and fmt.storage.tensor_scale)
    if layout.global_suffix and (needs_global or layout.name != "mactile"):
        gname, (gentry, gread) = need(layout.global_suffix)
        if gentry.dtype != "F32" or math.prod(gentry.shape) != 1:
            raise CheckpointError(f"{where}: tensor {gname!r}: {gentry.dtype} {list(gentry.shape)}, "
                                  f"but the global scale is one F32 value")
        stored = _F32(np.asarray(gread()).reshape(-1)[0])
        if not (np.isfinite(stored) and stored > 0):
            raise CheckpointError(f"{where}: tensor {gname!r}: global scale {float(stored)!r} "
                                  f"must be finite and positive")
        with np.errstate(over="ignore"):
            tensor_scale = _F32(_F32(1.0) / stored) if layout.global_scale is GlobalScale.DIVIDE else stored
        if not np.isfinite(tensor_scale) or tensor_scale == 0:
            raise CheckpointError(f"{where}: tensor {gname!r}: global scale {float(stored)!r} has "
                                  "no finite FP32 inverse")
    elif needs_global:
        raise CheckpointError(f"{where}: layer {base!r}: {fmt.name} needs a global scale and "
                              f"{layout.name} has none")
    scales = np.asarray(sread())
    _check_scale_codes(scales, fmt, sname, where)
    packed = np.asarray(cread())
    carried = {}
    for suf in layout.carried_suffixes:
        name = layout.tensor_name(base, suf)
        try:
            e, r = fetch(name)
        except KeyError:
            continue
        carried[name] = (e.dtype, np.asarray(r()))
    return PackedLayer(base=base, layout=layout, format=fmt, packed=packed,
                       scales=scales.reshape(want), tensor_scale=tensor_scale,
                       shape=tuple(lead) + (k,), n_blocks=n_blocks, stored_global=stored,
                       carried=carried)


def _check_scale_codes(scales: np.ndarray, fmt, name: str, where: str) -> None:
    """Refuse NaN scale codes and negative E4M3 scales (the libraries would produce NaN or
    negative weights from them; no quantizer writes them)."""
    bad = None
    top = {"nvfp4": 0x7F, "mxfp4": 0xFF}.get(fmt.name)  # below it: no NaN, no sign bit
    if scales.size == 0 or (top is not None and int(scales.max()) < top):
        return  # the usual case, in one pass
    if fmt.name in ("nvfp4",):
        bad = (scales & 0x7F) == 0x7F
        what = "the E4M3 NaN code"
        neg = (scales & 0x80) != 0
        if neg.any() and not bad[neg].all():
            i = np.unravel_index(int(np.argmax(neg & ~bad)), scales.shape)
            raise CheckpointError(f"{where}: tensor {name!r}: negative E4M3 block scale "
                                  f"0x{int(scales[i]):02x} at block {tuple(int(v) for v in i)}")
    elif fmt.name == "mxfp4":
        bad = scales == 0xFF
        what = "the E8M0 NaN code"
    if bad is not None and bad.any():
        i = np.unravel_index(int(np.argmax(bad)), scales.shape)
        raise CheckpointError(f"{where}: tensor {name!r}: {what} 0x{int(scales[i]):02x} as the "
                              f"block scale at block {tuple(int(v) for v in i)} "
                              f"({int(bad.sum())} in all)")


def layer_specs(base: str, shape: tuple[int, ...], fmt, layout: Layout, *,
                tensor_scale: bool, carried: dict | None = None) -> list[tuple[str, str, tuple]]:
    """``(name, dtype, shape)`` of the tensors a layer of logical ``shape`` in format
    ``fmt`` is stored as (known before any value is computed, so headers come first)."""
    bs = fmt.block_size
    lead, k = tuple(shape[:-1]), shape[-1]
    if k % 2:
        raise CheckpointError(f"layer {base!r}: {k} elements per row cannot be packed two per "
                              "byte (an odd K)")
    nb = -(-k // bs)
    cshape = lead + ((nb, bs // 2) if layout.grouped_codes else (k // 2,))
    sdt = layout.scale_dtype if layout.name != "mactile" else {1: "U8", 2: "U16"}[fmt.scale_dtype.itemsize]
    out = [(layout.tensor_name(base, layout.codes_suffix), layout.codes_dtype, cshape),
           (layout.tensor_name(base, layout.scale_suffix), sdt, lead + (nb,))]
    if layout.global_suffix and tensor_scale:
        out.append((layout.tensor_name(base, layout.global_suffix), "F32", layout.global_shape))
    for name, (dt, arr) in (carried or {}).items():  # an array, or its shape when planning
        out.append((name, dt, tuple(arr) if isinstance(arr, tuple) else tuple(arr.shape)))
    return out


def layer_tensors(w: LayerWeight) -> list[tuple[str, str, tuple[int, ...], Callable[[], np.ndarray]]]:
    """The stored tensors of a layer, ``(name, dtype, shape, produce)`` for
    :func:`write_safetensors`: the inverse of :func:`read_layer`, byte for byte."""
    lay, q = w.layout, w.quantized
    bs = q.format.block_size
    lead, k = tuple(w.shape[:-1]), w.shape[-1]
    nb = q.scales.shape[-1]

    def packed():
        return _pack(q.codes.reshape(lead + (nb * bs,))[..., :k], lay.nibble_order)

    return packed_layer_tensors(w.base, lay, q.format, w.shape, packed, q.scales, q.tensor_scale,
                                stored_global=w.stored_global, carried=w.carried)


def packed_layer_tensors(base: str, layout: Layout, fmt, shape: tuple[int, ...],
                         packed: Callable[[], np.ndarray], scales: np.ndarray,
                         tensor_scale: np.float32 | None, *, stored_global=None,
                         carried: dict | None = None) -> list[tuple]:
    """:func:`layer_tensors` of a layer whose codes are already packed: ``packed()``
    returns the code bytes ``[..., K/2]`` in ``layout``'s nibble order (any shape of that
    many bytes in row-major order); ``scales`` the scale words."""
    carried = dict(carried or {})
    specs = layer_specs(base, shape, fmt, layout, tensor_scale=tensor_scale is not None,
                        carried=carried)
    lead = tuple(shape[:-1])
    nb = specs[1][2][-1]

    def codes():
        return np.asarray(packed()).reshape(specs[0][2])

    def scale_words():
        return np.asarray(scales, dtype=DTYPES[specs[1][1]]).reshape(lead + (nb,))

    producers = [codes, scale_words]
    if len(specs) > 2 + len(carried):
        g = _stored_global_of(layout, tensor_scale, stored_global)
        producers.append(lambda: np.full(layout.global_shape, g, dtype="<f4"))
    producers += [(lambda arr=arr: arr) for _, arr in carried.values()]
    return [spec + (p,) for spec, p in zip(specs, producers)]


def _stored_global(w: LayerWeight) -> np.float32:
    return _stored_global_of(w.layout, w.quantized.tensor_scale, w.stored_global)


def _stored_global_of(layout: Layout, tensor_scale, stored) -> np.float32:
    t = _F32(tensor_scale)
    if layout.global_scale is GlobalScale.DIVIDE:
        if stored is not None and _F32(_F32(1.0) / stored) == t:
            return stored  # as read: g, whose inverse is T
        return _F32(_F32(1.0) / t)  # named: the golden T written as fl32(1 / T)
    return t


def layer_from_quantized(base: str, q: Quantized, layout: Layout, *, shape=None,
                         carried=None) -> LayerWeight:
    """A layer to write from a golden ``Quantized`` (``shape``: the logical ``[..., K]``
    when the last block is partial; default ``q.shape``)."""
    if layout.name != "mactile" and q.format.name != layout.format_name:
        raise CheckpointError(f"layer {base!r}: layout {layout.name} stores {layout.format_name}, "
                              f"not {q.format.name}")
    if layout.name != "mactile" and q.format.block_size != layout.block_size:
        raise CheckpointError(f"layer {base!r}: layout {layout.name} uses blocks of "
                              f"{layout.block_size}, not {q.format.block_size}")
    if q.meta is not None:
        raise CheckpointError(f"layer {base!r}: {q.format.name} keeps per-block metadata that "
                              "no checkpoint layout stores")
    shape = tuple(q.shape if shape is None else shape)
    if layout.padding is Padding.STORED and shape[-1] % q.format.block_size:
        shape = q.shape  # stored zero-padded
    return LayerWeight(base=base, layout=layout, quantized=q, shape=shape,
                       carried=dict(carried or {}))


# ============================================================ dequantization
def _in_chunks(rows: int, step: int, work) -> list:
    """``work(r0, r1)`` over row chunks on the golden thread pool (``MACTILE_THREADS``;
    NumPy releases the GIL), results in chunk order."""
    import concurrent.futures

    from .block import _threads

    bounds = [(r0, min(rows, r0 + step)) for r0 in range(0, rows, step)]
    n = _threads()
    if n == 1 or len(bounds) == 1:
        return [work(a, b) for a, b in bounds]
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda ab: work(*ab), bounds))


def dequantize_layer(w: LayerWeight, *, order: DequantOrder | None = None,
                     dtype: ModelDtype | None = None, transpose: bool | None = None) -> np.ndarray:
    """The layer's weight as its layout's library dequantizes it, in the model dtype's
    storage (BF16 as uint16 bits: :func:`bf16_to_float32`), logical shape (and transposed
    where the layout says so). ``order``/``dtype`` override the layout's options.

    Computed in chunks of blocks (each FP32 step as the library rounds it), so the
    temporaries stay in cache and memory stays a small multiple of the output."""
    lay, q = w.layout, w.quantized
    order = lay.dequantize if order is None else order
    dtype = lay.model_dtype if dtype is None else dtype
    bs = q.format.block_size
    lead, k = tuple(w.shape[:-1]), w.shape[-1]
    nb = q.scales.shape[-1]
    codes = q.codes.reshape(-1, nb * bs)
    rows = codes.shape[0]
    store = {ModelDtype.BF16: np.dtype("<u2"), ModelDtype.F16: np.dtype("<f2"),
             ModelDtype.F32: np.dtype("<f4")}[dtype]
    out = np.empty((rows, k), dtype=store)
    table = FP4_E2M1.values.astype(_F32)
    if lay.negative_zero is NegativeZeroCode.POSITIVE:
        table[FP4_E2M1.sign_mask] = 0.0
    sc = q.scales.reshape(rows, nb)
    # the per-block FP32 scale, rounded as the library forms it
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if order is DequantOrder.EXACT:
            sg = None
        elif order is DequantOrder.POW2:
            sg = np.ldexp(_F32(1.0), sc.astype(np.int32) - E8M0.bias).astype(_F32)
        else:
            s = FP8_E4M3.values.astype(_F32)[sc]
            g = w.stored_global if w.stored_global is not None else _stored_global(w)
            if order is DequantOrder.SCALE_DIV_FIRST:
                if lay.global_scale is not GlobalScale.DIVIDE:
                    g = _F32(_F32(1.0) / g)
                sg = (s / g).astype(_F32)
            else:
                t = g if lay.global_scale is GlobalScale.MULTIPLY else _F32(_F32(1.0) / g)
                sg = (s * t).astype(_F32)
    step = max(1, (1 << 16) // (nb * bs))

    def work(r0, r1):
        if sg is None:
            part = Quantized(format=q.format, shape=(r1 - r0, nb * bs),
                             codes=q.codes.reshape(rows, nb, bs)[r0:r1],
                             scales=sc[r0:r1], tensor_scale=q.tensor_scale)
            with np.errstate(over="ignore"):
                y32 = part.dequantize().astype(_F32)  # exact, then FP32
        else:
            y32 = np.take(table, codes[r0:r1]).reshape(r1 - r0, nb, bs)
            with np.errstate(over="ignore", invalid="ignore"):
                y32 *= sg[r0:r1, :, None]
            y32 = y32.reshape(r1 - r0, nb * bs)
        out[r0:r1] = _round_to(y32[:, :k], dtype)

    _in_chunks(rows, step, work)
    out = out.reshape(lead + (k,))
    if (lay.transpose_output if transpose is None else transpose) and out.ndim >= 3:
        out = np.ascontiguousarray(np.swapaxes(out, 1, 2))
    return out


def requant_error(src: np.ndarray, q: Quantized) -> tuple[float, float]:
    """``(MSE, SQNR dB)`` of ``q``'s dequantized values (cropped to ``src``'s last axis)
    against ``src``, summed in float64 over chunks of rows (no full float64 copy).

    ``src`` holds float32 values (a model dtype), whose squares neither underflow nor
    overflow float64 (FP32's range squared is 1e-90 .. 1e77), so the plain sums are right
    where :class:`~.block.QuantError` needs its scaling for float64 inputs."""
    if src.dtype.kind != "f" or src.dtype.itemsize > 4:
        raise TypeError(f"requant_error sums float32 (or narrower) values, got {src.dtype}; "
                        "use QuantError.between for float64")
    k = src.shape[-1]
    x2 = src.reshape(-1, k)
    rows = x2.shape[0]
    nb, bs = q.scales.shape[-1], q.format.block_size
    codes = q.codes.reshape(rows, nb, bs)
    scales = q.scales.reshape(rows, nb)
    step = max(1, (1 << 16) // (nb * bs))
    ctx = {"tensor_scale": q.tensor_scale}

    def work(r0, r1):
        y = np.empty(((r1 - r0) * nb, bs), dtype=np.float64)
        # the format's own chunk dequantizer (what Quantized.dequantize runs per chunk)
        q.format._dequantize_into(codes[r0:r1].reshape(-1, bs), scales[r0:r1].reshape(-1),
                                  None, ctx, y)
        x = x2[r0:r1].astype(np.float64)
        d = (y.reshape(r1 - r0, nb * bs)[:, :k] - x).reshape(-1)
        x = x.reshape(-1)
        # einsum, not np.dot: BLAS threads contend on shared cores (6.6 s vs 0.2 s measured)
        return float(np.einsum("i,i->", d, d)), float(np.einsum("i,i->", x, x))

    parts = _in_chunks(rows, step, work)
    noise = math.fsum(p[0] for p in parts)
    signal = math.fsum(p[1] for p in parts)
    mse = noise / x2.size
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return mse, sqnr


# ============================================================ checkpoints
def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: {what} is not valid JSON ({str(e).splitlines()[0]})") from None
    except OSError as e:
        raise CheckpointError(f"cannot read {str(path)!r}: {(e.strerror or str(e)).lower()}") from None


class Checkpoint:
    """A checkpoint file or folder (one file, several, or shards with their index JSON).

    Opening checks every file's header and, for a folder with an index, that the index and
    the shards agree (every shard present, every tensor where the index says, none twice).
    """

    def __init__(self, path):
        self.path = Path(os.fspath(path))
        st = _stat_input(self.path)
        if stat.S_ISREG(st.st_mode) and self.path.name.endswith(".json"):
            if self.path.name != INDEX_NAME:  # config.json and the like
                raise CheckpointError(f"{self.path}: a JSON file, not a checkpoint; give the "
                                      ".safetensors file or its folder")
            self.path = self.path.parent  # the index names its folder's shards
            st = _stat_input(self.path)
        self.index: dict | None = None
        self.config: dict | None = None
        self.hf_quant_config: dict | None = None
        self.is_folder = stat.S_ISDIR(st.st_mode)
        if self.is_folder:
            idx = self.path / INDEX_NAME
            if idx.exists():
                self.index = _read_json(idx, "the index")
                wm = self.index.get("weight_map") if isinstance(self.index, dict) else None
                if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
                    raise CheckpointError(f"{idx}: the index has no weight_map of tensor -> shard file")
                names = sorted(set(wm.values()))
                for n in names:
                    if os.path.basename(n) != n:
                        raise CheckpointError(f"{idx}: shard {n!r} is not a file name in the folder")
                    if not (self.path / n).is_file():
                        raise CheckpointError(f"{idx}: shard {n!r} listed for tensor "
                                              f"{next(k for k, v in wm.items() if v == n)!r} "
                                              "does not exist")
            else:
                names = sorted(p.name for p in self.path.glob("*.safetensors"))
                if not names:
                    raise CheckpointError(f"{self.path}: no .safetensors files in the folder")
            cfg = self.path / "config.json"
            if cfg.is_file():
                self.config = _read_json(cfg, "config.json")
            hf = self.path / "hf_quant_config.json"  # ModelOpt's export names itself here
            if hf.is_file():
                self.hf_quant_config = _read_json(hf, "hf_quant_config.json")
            self.files = [SafetensorsFile(self.path / n) for n in names]
        elif stat.S_ISREG(st.st_mode):
            self.files = [SafetensorsFile(self.path)]
        else:
            raise CheckpointError(f"checkpoint {str(self.path)!r} is not a file or a folder")
        self.where: dict[str, SafetensorsFile] = {}
        for f in self.files:
            for name in f.entries:
                if name in self.where:
                    raise CheckpointError(f"{f.path}: tensor {name!r} is also in "
                                          f"{self.where[name].path.name}")
                self.where[name] = f
        if self.index is not None:
            wm = self.index["weight_map"]
            for name, shard in wm.items():
                f = self.where.get(name)
                if f is None or f.path.name != shard:
                    raise CheckpointError(f"{self.path / INDEX_NAME}: tensor {name!r} is listed in "
                                          f"{shard!r} but " + ("no shard holds it" if f is None
                                                               else f"{f.path.name!r} holds it"))
            extra = sorted(set(self.where) - set(wm))
            if extra:
                raise CheckpointError(f"{self.where[extra[0]].path}: tensor {extra[0]!r} is not "
                                      f"in the index {INDEX_NAME}")

    # ------------------------------------------------------------ tensors
    def entry(self, name: str) -> TensorEntry:
        return self.where[name].entries[name]

    def fetch(self, name: str):
        f = self.where[name]
        return f.entries[name], (lambda: f.read(name))

    def layout(self, name: str | None = None) -> Layout | None:
        """The layout (``name`` forces one; default :func:`detect_layout`)."""
        if name is not None:
            if name not in LAYOUTS:
                raise CheckpointError(f"unknown layout {name!r}; known: {', '.join(LAYOUTS)}")
            return LAYOUTS[name]
        return detect_layout(self)

    def items(self, layout: Layout | None) -> Iterator[LayerWeight | PlainTensor]:
        """Layers and plain tensors in file order, each read when iterated."""
        bases = self.layer_bases(layout) if layout is not None else {}
        done = set()
        for f in self.files:
            for name, e in f.entries.items():
                if name in done:
                    continue
                base = bases.get(name)
                if base is None:
                    done.add(name)
                    yield PlainTensor(name, e.dtype, e.shape, (lambda f=f, n=name: f.read(n)))
                    continue
                spec = None
                if layout.name == "mactile":
                    spec = self.mactile_specs().get(base)
                w = read_layer(base, layout, self.fetch, str(f.path), spec)
                done.update(w.tensor_names())
                yield w

    def layer_bases(self, layout: Layout) -> dict[str, str]:
        """Tensor name -> its layer's base, for every tensor of a quantized layer."""
        out = {}
        tail = layout.separator + layout.codes_suffix
        for name in self.where:
            if not name.endswith(tail):
                continue
            base = name[: -len(tail)]
            if layout.name == "modelopt-nvfp4":  # ".weight" is also every plain weight's name
                if layout.tensor_name(base, layout.scale_suffix) not in self.where:
                    continue
            for s in layout.suffixes + layout.carried_suffixes:
                out[layout.tensor_name(base, s)] = base
        return out

    def mactile_specs(self) -> dict:
        specs = {}
        for f in self.files:
            raw = (f.metadata or {}).get(MACTILE_META_KEY)
            if raw is None:
                continue
            try:
                d = json.loads(raw)
                assert isinstance(d, dict)
            except (ValueError, AssertionError):
                raise CheckpointError(f"{f.path}: __metadata__ {MACTILE_META_KEY!r} is not a JSON "
                                      "object") from None
            specs.update(d)
        return specs


_FORCE = "a layout can be forced: inspect --layout, convert --in-layout"


def detect_layout(ckpt: Checkpoint) -> Layout | None:
    """The layout named by config.json's ``quantization_config`` (or the files' metadata),
    else the one whose tensor names and dtypes the files hold; None when no tensor is
    quantized. Raises :class:`CheckpointError` for a quantization config of an unknown
    layout, or U8 tensors named like no known layout's."""
    qc = (ckpt.config or {}).get("quantization_config") if isinstance(ckpt.config, dict) else None
    hf = ckpt.hf_quant_config
    if qc is None and isinstance(hf, dict) and isinstance(hf.get("quantization"), dict):
        qc = {"quant_method": (hf.get("producer") or {}).get("name"),
              "quant_algo": hf["quantization"].get("quant_algo")}
    if isinstance(qc, dict):
        method, fmt = qc.get("quant_method"), qc.get("format") or qc.get("quant_algo") or ""
        for lay in LAYOUTS.values():
            m, f = lay.config_marker
            if method == m and (not f or fmt == f):
                return lay
        raise CheckpointError(f"{ckpt.path}: config.json names quantization {method!r}"
                              + (f" format {fmt!r}" if fmt else "") + ", which is no known layout "
                              f"(known: {', '.join(LAYOUTS)}; {_FORCE})")
    if any(MACTILE_META_KEY in (f.metadata or {}) for f in ckpt.files):
        return LAYOUTS["mactile"]
    names = ckpt.where
    for name in names:  # by name: read_layer then names a wrong dtype or shape
        if name.endswith(".weight_packed"):
            base = name[: -len(".weight_packed")]
            if base + ".weight_global_scale" in names:
                return LAYOUTS["compressed-tensors-nvfp4"]
            scale = names.get(base + ".weight_scale")
            if scale is not None and scale.entries[base + ".weight_scale"].dtype == "U8" \
                    and ckpt.entry(name).dtype == "U8":
                return LAYOUTS["compressed-tensors-mxfp4"]
            return LAYOUTS["compressed-tensors-nvfp4"]  # read_layer names what is missing
        if name.endswith(".weight") and name[:-7] + ".weight_scale_2" in names:
            return LAYOUTS["modelopt-nvfp4"]
        if name.endswith("_blocks"):
            return LAYOUTS["gpt-oss-mxfp4"]
    u8 = [n for n, f in names.items() if f.entries[n].dtype in ("U8", "F8_E4M3")]
    if u8:
        raise CheckpointError(f"{ckpt.where[u8[0]].path}: tensor {u8[0]!r} "
                              f"({ckpt.entry(u8[0]).dtype}) looks quantized but its names match no "
                              f"known layout ({', '.join(LAYOUTS)}; {_FORCE})")
    return None


@dataclass
class PlannedFile:
    """One output file: its name, metadata and tensors (produced when written)."""

    name: str
    metadata: dict[str, str] | None
    tensors: list = field(default_factory=list)  # (name, dtype, shape, produce)
    order: list[str] | None = None


def write_planned(folder: Path | None, files: list[PlannedFile], *, target: Path | None = None,
                  index_metadata: dict | None = None, extra_files: dict | None = None
                  ) -> list[Path]:
    """Write planned files into ``folder`` (already a private temporary folder), or the one
    file to ``target``; with several files, the index JSON as transformers writes it
    (``json.dumps(index, indent=2, sort_keys=True) + "\\n"``)."""
    written = []
    if target is not None:
        (f,) = files
        write_safetensors(target, f.tensors, f.metadata, order=f.order)
        return [target]
    total, weight_map = 0, {}
    for f in files:
        p = folder / f.name
        write_safetensors(p, f.tensors, f.metadata, order=f.order)
        written.append(p)
        for name, dtype, shape, _ in f.tensors:
            weight_map[name] = f.name
            total += math.prod(shape) * DTYPES[dtype].itemsize
    if index_metadata is not None:
        meta = dict(index_metadata)
        meta["total_size"] = total
        index = {"metadata": meta, "weight_map": weight_map}
        (folder / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        written.append(folder / INDEX_NAME)
    for name, data in (extra_files or {}).items():  # bytes, or a file to copy
        if isinstance(data, (bytes, bytearray)):
            (folder / name).write_bytes(data)
        else:
            shutil.copyfile(data, folder / name)
        written.append(folder / name)
    return written


def roundtrip_files(ckpt: Checkpoint, layout: Layout | None = None) -> list[PlannedFile]:
    """Plan a checkpoint's own files from its golden layers (read -> write): every layer
    re-packed from its ``Quantized``, every other tensor copied, each file's order and
    metadata kept (a layer split across shards is written back across the same shards).
    Byte-identical to the input for files the safetensors writer made."""
    layout = ckpt.layout() if layout is None else layout
    bases = ckpt.layer_bases(layout) if layout is not None else {}
    specs = ckpt.mactile_specs() if layout is not None and layout.name == "mactile" else {}
    produced: dict[str, tuple] = {}  # tensor name -> its (name, dtype, shape, produce)

    def layer_tensor(name):
        if name not in produced:
            base = bases[name]
            w = read_layer(base, layout, ckpt.fetch, str(ckpt.where[name].path), specs.get(base))
            for t in layer_tensors(w):
                produced[t[0]] = t
        return produced.pop(name)

    out = []
    for f in ckpt.files:
        pf = PlannedFile(f.path.name, f.metadata, order=list(f.entries))
        for name, e in f.entries.items():
            if name in bases:
                pf.tensors.append(layer_tensor(name))
            else:
                pf.tensors.append((name, e.dtype, e.shape, (lambda f=f, n=name: f.read(n))))
        out.append(pf)
    if produced:  # the layout writes a tensor the file did not hold
        raise CheckpointError(f"{ckpt.path}: tensor {next(iter(produced))!r} is missing")
    return out
