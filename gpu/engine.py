"""The Hopper GEMM engine (``kernels/engine.cu``): one warp-specialized, TMA + mbarrier +
wgmma kernel template for every weight format, and its launcher.

``y[M, N] = x[M, K] @ W[N, K].T`` computed as ``D[n, m]``: weights are the wgmma A operand
(decoded in registers, or read from shared memory), activations B (tensor-map tiles).
A configuration is ``EngineConfig(bn, stages, wgs)``: tokens per tile (the wgmma N),
pipeline depth, consumer warpgroups (64 output features each). CTAs are persistent and take
equal stripes of the (tile, k-block) sequence (stream-K with a deterministic reduction of
shared tiles), after rounds of whole tiles where the tiles outnumber the CTAs unevenly and
the activations are large (hybrid stream-K, :func:`whole_rounds`); ``n_ctas`` defaults to
one per SM, capped by the work.

Formats (``formats.ENGINE_FORMATS``): the FP4 family from a :class:`PackedW4A16` ``frag``
layout (:func:`gemm_fp4`), NestedFP's planes in FP16 mode (:func:`gemm_planes`) and FP8 mode
(:func:`gemm_fp8`). :func:`config_for` is the default choice by M; ``gpu/tuning`` holds
measured per-shape overrides (:mod:`mactile.gpu.linear`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np

from . import prebuilt
from .codegen import TOKEN_TILES, wgmma_source
from .formats import ENGINE_FORMATS, EngineScale, engine_format_id, engine_traits, engine_traits_header, prelude
from .runtime import ceil_div, l2_bytes, load_source, require_cupy, sm_count

__all__ = ["EngineConfig", "SCHEDULES", "engine_source", "engine_name", "config_for", "gemm_fp4",
           "gemm_planes", "gemm_fp8", "smem_bytes", "max_stages", "default_ctas",
           "weight_bytes_per_element", "prebuilt_jobs", "SMEM_LIMIT", "PDL_MAX_M", "use_pdl", "set_trace",
           "set_source", "TRACE_FIELDS", "TRACE_SLOTS", "whole_rounds", "HYBRID", "HYB_MIN_BN",
           "HYB_L2_FRACTION", "HYB_ONE_TOKEN_TILE", "rounds_any_activations", "PARTS_REDUCE", "PARTS_MIN",
           "prebuilt_names", "SMALL_LAYER_BYTES_64", "SMALL_LAYER_BYTES_256", "CLUSTER_TILES",
           "CLUSTER_TILES_HEAVY_MAX_K", "BATCHED_MAX_BN_BP", "tuning_candidates", "STREAMK_IDLE",
           "early_units", "EARLY_UNITS_PLANES", "EARLY_UNITS_RESCALE", "EARLY_CANDIDATE", "ONE_WG_MAX_BN",
           "split_parts", "PART_STRIPES", "PART_HYBRID", "PART_PARTS", "PART_CLUSTER", "CLUSTER_PARTS",
           "CLUSTER_MAX_P", "CLUSTER_MIN_BN", "cluster_parts", "clusters_fit"]

#: Dynamic shared memory a block may use on sm_90 (227 KB).
SMEM_LIMIT = 232448

#: Largest M launched with programmatic dependent launch by default (:func:`use_pdl`).
#: Measured on H100 in graphs of back-to-back layers: PDL saves 1-1.8 us per layer at
#: M <= 64 (4096x4096, M = 1: 11.0 -> 9.8 us), is neutral at M = 256..1024 and costs 11% at
#: M = 4096 (8192x8192: 696 -> 775 us; cause not established).
PDL_MAX_M = 128


def use_pdl(M: int) -> bool:
    """Whether the engine's callers launch an ``M``-token GEMM with PDL by default."""
    return M <= PDL_MAX_M


#: Whether launches with at least as many tiles as CTAs take whole-tile rounds before the
#: stream-K stripes (:func:`whole_rounds`); off: pure stream-K. A switch for A/B measurements.
HYBRID = True
#: Whether a launch whose tiles are each split into the same number of parts, one per CTA,
#: sums them in all of those CTAs at once (each a slice of the tile, :func:`split_parts`)
#: rather than in the last to arrive alone. A switch for A/B measurements.
PARTS_REDUCE = True
#: Fewest parts per tile summed together. Measured on the H100 (nvfp4, one process, graph
#: replay with PDL): 4-12 parts gained up to 21% (4096x4096 at M = 64: 16.4 -> 12.9 us) and
#: lost nowhere beyond 1%; 2-3 parts, where the last arriver reads only 1-2 partial tiles,
#: lost up to 6% (5120x10240 at M = 64, 3 parts: 24.0 -> 25.4 us; 8192x8192 at M = 256,
#: 2 parts: 54.0 -> 56.0 us), and 10% when re-measured after the lighter publication of
#: partial sums (the same case 52.1 -> 58.2 us; docs/gpu.md note 13), so they keep the last
#: arriver.
PARTS_MIN = 4
#: Fewer tiles than this fraction of the SMs, but more than half of them: stream-K over every
#: SM rather than one whole tile per CTA (:func:`default_ctas`). Measured on the H100 (one
#: process, graph replay): 5120x25600 (100 tiles of 256 rows) at M = 1..64, nvfp4 43.9 ->
#: 37.2 us (+18%), NestedFP16 within 1%; at 112 tiles (4096x28672) nvfp4 gained 3-4% at
#: M <= 16 and lost 1% at M = 64, NestedFP16 lost 5%, so 112 keeps whole tiles.
STREAMK_IDLE = 0.8
#: Smallest token tile with a hybrid instantiation (prebuilt and used): the tiles outnumber
#: the SMs mostly at M > 64; below, only very wide layers (N >= 33792) would have rounds.
HYB_MIN_BN = 128
#: Whole-tile rounds only when the activations are at least this fraction of the L2
#: (:func:`whole_rounds`; tests set 0 to exercise the rounds on small shapes).
HYB_L2_FRACTION = 0.25

#: Whole-tile rounds whatever the activations' size (:data:`HYB_L2_FRACTION` waived) when
#: a launch has a single 256-token tile in M and the format's decode is light (nvfp4, mxfp4,
#: razer-g128): its stream-K stripes would each cross one or two tiles, every crossing a
#: 128 KB partial tile through the L2 (:func:`rounds_any_activations`). Measured on the H100
#: (same process, M = 256, stream-K -> rounds, us): nvfp4 4096x28672 93.6 -> 89.9, 5120x25600
#: 101.4 -> 96.8; razer-g128 97.0 -> 91.5 and 105.5 -> 106.5; NestedFP16 121.1 -> 122.9 and
#: 132.1 -> 133.9 (hence not NestedFP16, nor razer, not measured); at M = 512 (two token
#: tiles) they gained at most 3.5% and lost up to 38% (5120x25600, nvfp4 186.1 -> 230.8 us),
#: as :func:`whole_rounds` says. A switch for A/B measurements.
HYB_ONE_TOKEN_TILE = True

#: Consumer schedules: 0 interleaved (decode the next k-step while one wgmma runs; few A
#: registers, for wide token tiles), 1 batched (decode the whole next stage while the current
#: stage's wgmmas run; more independent work per warp, for narrow tiles where decode dominates).
SCHEDULES = (0, 1)


@dataclass(frozen=True)
class EngineConfig:
    """A tile configuration: ``bn`` tokens per tile (wgmma N), ``stages`` pipeline stages,
    ``wgs`` consumer warpgroups (64 weight rows each; 3-4 only for ``bn <= 64``), ``sched``
    the consumer schedule (:data:`SCHEDULES`; -1: batched for ``bn <= 64``), ``n_ctas``
    persistent CTAs (0: :func:`default_ctas`), ``early`` the pipeline units whose weight
    copies go out before the PDL wait (-1: the format's rule, :func:`early_units`; 0: none;
    at most ``stages`` take effect)."""

    bn: int
    stages: int
    wgs: int = 2
    n_ctas: int = 0
    sched: int = -1
    early: int = -1

    def __post_init__(self):
        if self.bn not in TOKEN_TILES:
            raise ValueError(f"EngineConfig.bn must be one of {TOKEN_TILES}, got {self.bn}")
        if not 2 <= self.stages <= 16:
            raise ValueError(f"EngineConfig.stages must lie in [2, 16], got {self.stages}")
        if self.wgs not in (1, 2, 3, 4) or (self.wgs > 2 and self.bn > 64):
            raise ValueError(f"EngineConfig.wgs must be 1 or 2 (up to 4 for bn <= 64), got {self.wgs}")
        if self.n_ctas < 0:
            raise ValueError(f"EngineConfig.n_ctas must be >= 0, got {self.n_ctas}")
        if self.sched not in (-1,) + SCHEDULES:
            raise ValueError(f"EngineConfig.sched must be one of {SCHEDULES} or -1, got {self.sched}")
        if not -1 <= self.early <= 16:
            raise ValueError(f"EngineConfig.early must lie in [-1, 16], got {self.early}")

    @property
    def schedule(self) -> int:
        """The consumer schedule this configuration compiles to."""
        return self.sched if self.sched >= 0 else (1 if self.bn <= 64 else 0)


#: Units (pipeline stages) whose weight copies the producer issues before
#: ``griddepcontrol.wait`` by default (the kernel's ``EARLY``; weights are never written, so
#: under PDL they land while the previous kernel finishes). Measured on the H100 (same
#: process, graph replay, PDL, outputs bitwise equal; docs/gpu.md note 16): NestedFP's planes
#: 1-22% less time per layer at M <= 64 in both modes, every stage early (NestedFP16 at
#: M = 1 0.95 -> 1.03x cuBLAS FP16); at 128-token tiles 2-3% less at M = 128 but 2.5% more
#: at M = 256, which runs without PDL (the first stage's activations queue behind the early
#: weights); razer-g128's 8-token tiles with 4 stages 1.5-8% less on every layer at M = 1;
#: nvfp4 and mxfp4 +2% and 0% in the geomean at M = 1 (4096x28672 and 25600x5120 4-7%
#: slower, the rest up to 8% faster); razer 7% slower with 12 stages (its one producer
#: thread issues 96 copies before the wait), -1.7 .. +4.7% per layer with 2 or 4. Where the
#: rule says none, the tuning sweep times :data:`EARLY_CANDIDATE` stages per layer.
EARLY_UNITS_PLANES = 12
EARLY_UNITS_RESCALE = 4
#: Early units a tuning sweep tries where :func:`early_units` gives none (and none where it
#: gives some), where M launches with PDL (:func:`use_pdl`: token tiles of at most 128).
EARLY_CANDIDATE = 4


def early_units(fmt: str, cfg: EngineConfig) -> int:
    """The kernel's ``EARLY`` for ``cfg``: ``cfg.early`` where set, else the format's rule
    (NestedFP's planes :data:`EARLY_UNITS_PLANES` at token tiles up to 64, razer-g128's
    8-token tiles :data:`EARLY_UNITS_RESCALE`, none elsewhere). The kernel issues at most
    ``cfg.stages`` of them."""
    if cfg.early >= 0:
        return cfg.early
    tr = engine_traits(fmt)
    return (EARLY_UNITS_PLANES if tr["A_SRC"] != "A_FRAG" and cfg.bn <= 64
            else EARLY_UNITS_RESCALE if tr["RESCALE"] and cfg.bn == 8 else 0)


def _cround(a: int, b: int) -> int:
    return -(-a // b) * b


def _geometry(fmt: str, bn: int, wgs: int) -> dict:
    """Mirror of ``EngCfg`` (byte counts of a stage, the epilogue tile, the TMA bytes)."""
    tr = engine_traits(fmt)
    bk = tr["BK"]
    b_bytes = (bk * (1 if tr["FP8"] else 2) // 128) * bn * 128
    if tr["A_SRC"] == "A_FRAG":
        frag_sc = (bk // tr["BLOCK"]) * 64 * tr["SCALE_BYTES"]
        a_bytes = wgs * _cround(bk * 32 + frag_sc, 128)
    elif tr["A_SRC"] == "A_PLANES":
        a_bytes = 2 * wgs * 64 * 64
    else:
        a_bytes = wgs * 64 * 128
    stage = _cround(b_bytes + a_bytes, 1024)
    epi_tok = 16 if (bk > 64 and bn == 256) else min(bn, 64)  # EngCfg::EPI_TOK
    epi = wgs * epi_tok * 72 * 2
    return {"bk": bk, "stage": stage, "epi": epi}


def smem_bytes(fmt: str, cfg: EngineConfig) -> int:
    """Dynamic shared memory of one CTA (mirror of ``EngCfg::SMEM``)."""
    g = _geometry(fmt, cfg.bn, cfg.wgs)
    return 1024 + cfg.stages * g["stage"] + g["epi"] + 2 * cfg.stages * 8 + 16


def max_stages(fmt: str, bn: int, wgs: int = 2, cap: int = 12) -> int:
    """Deepest pipeline that fits the shared memory (at most ``cap``)."""
    s = cap
    while s > 2 and smem_bytes(fmt, EngineConfig(bn, s, wgs)) > SMEM_LIMIT:
        s -= 1
    return s


#: Small layers (weight bytes at most these) take other nvfp4/mxfp4 defaults
#: (:func:`config_for`): two consumer warpgroups at 64 tokens, 128-token tiles instead of 256
#: at M <= 256. Measured on the H100 (nvfp4, one process, nine shapes): at M = 64 two
#: warpgroups took 4096x4096 (9.4 MB) from 12.3 to 11.3 us, 8192x5120 and 14336x4096 2-4%
#: less, and cost the layers of 66-74 MB 4-5%; at M = 256 128-token tiles took 4096x4096
#: from 25.3 to 21.2 us, 4096x6144 (14 MB) 32.3 to 29.3, and cost 6-17% from 29.5 MB up (a
#: second token tile decodes the weights again). In the benchmark that followed, the same
#: choices cost razer (its lookup decode needs the four warpgroups) 5-9% on 4096x6144 and
#: 8192x5120, and 128-token tiles at M >= 512 cost 4096x4096 and 4096x6144 20-50%: hence
#: the bit-placement formats only, and M <= 256. razer-g128 (256-token tiles since its
#: rescaled accumulators) takes the 128-token rule too: 4096x4096 at M = 256 22.2 us against
#: 26.2 us (H100, one process).
SMALL_LAYER_BYTES_64 = 48 << 20
SMALL_LAYER_BYTES_256 = 16 << 20
#: Widest token tile that the bit-placement formats (nvfp4, mxfp4) run with the batched
#: schedule by default when they have two consumer warpgroups. Measured on the H100 (nvfp4,
#: M = 64, one process, after the shift decode): batched against interleaved at 64 tokens
#: and two warpgroups took 4096x14336, 14336x4096 and 8192x8192 6-8% less time, 4096x4096
#: 2%; at 128 tokens it lost 2-4% on two of three shapes, so 128 stays interleaved. With
#: four warpgroups (96 registers) the batched 64-token kernel spills (164 bytes), so the
#: large layers that take four keep the interleaved schedule (5120x25600: 43.8 us, equal to
#: batched with two warpgroups, 44.0 us).
BATCHED_MAX_BN_BP = 64
#: NestedFP8 (PROMOTE) runs 256-token tiles (each stage's partial sums promoted in two
#: passes of 128 tokens, ``EngCfg::PN``; the batched schedule) from M = 2048, and at
#: 512 < M < 2048 on layers of at least this many weight bytes; 128-token tiles below.
#: Measured on the H100 (one process, 128 interleaved -> 256 batched, us; the outputs
#: bitwise equal): M = 4096 8192x8192 546 -> 456, 4096x28672 979 -> 820, 25600x5120
#: 1149 -> 968, 4096x6144 226 -> 196, 4096x4096 146 -> 138; M = 1024 on the layers of
#: 67-131 MB 4-30% less time (25600x5120 331 -> 255), on 4096x6144 (25 MB) 27% more
#: (57 -> 73: 192 tiles on 132 SMs) and on 4096x4096 2% more; M <= 512 mostly slower
#: (4096x4096 at M = 256 20.3 -> 27.7).
PROMOTE_256_MIN_M = 2048
PROMOTE_256_MIN_BYTES = 32 << 20


#: Widest token tile at which FP8 mode (A from shared memory: nothing to decode) also tries
#: one consumer warpgroup per CTA in the tuning sweep: 64-feature tiles, so twice or four
#: times the tiles of two or four warpgroups, whole rows per CTA on the large layers
#: instead of parts summed together (cuBLAS FP8's choice at these M: 64-row tiles).
#: Measured on the H100 (docs/gpu.md note 18): chosen on 8192x8192 at M = 1 and 64 and
#: 14336x4096 at M = 64 (3.7-7.0%), up to 23% slower on the small layers.
ONE_WG_MAX_BN = 64


def _wgs4_max(fmt: str) -> int:
    """The widest token tile at which four consumer warpgroups still fit their registers
    (96 each): none for razer-g128 (eight k-steps of A per stage), 16 for NestedFP16's plane
    fragments, 32 for NestedFP8's promotion tile, 64 for the other FP4 formats."""
    tr = engine_traits(fmt)
    if tr["A_SRC"] == "A_FRAG" and tr["BK"] > 64:
        return 0
    return 16 if tr["A_SRC"] == "A_PLANES" else 32 if tr["PROMOTE"] else 64


#: At 128 < M <= 256 tokens, whether a layer takes the token tile (128 or 256) whose tiles
#: split in two parts summed in a cluster (:func:`cluster_parts`) when the other one's do
#: not (:func:`config_for` with ``N``): the finish through distributed shared memory is the
#: cheap one. Measured on the H100 (same process, M = 256 / 160, us): nvfp4 4096x6144 29.5 ->
#: 27.2 / 45.9 -> 32.2 (128 -> 256 tokens), 14336x4096 50.2 -> 48.5 / 47.7 -> 46.6 (256 ->
#: 128); mxfp4 alike, razer-g128 equal at M = 256 and 42.7 -> 33.4 at 160 (docs/gpu.md
#: note 15). A switch for A/B measurements.
CLUSTER_TILES = True
#: Largest K at which the formats with a costly decode (razer's lookup, NestedFP16's planes)
#: take 128-token tiles for the cluster rule (:data:`CLUSTER_TILES`): a second token tile
#: decodes the weights again, which a long main loop does not repay. Measured (H100, M = 256):
#: 4096x4096 razer 25.6 -> 20.8 us, NestedFP16 32.4 -> 24.2; 14336x4096 razer 52.8 -> 57.0,
#: NestedFP16 68.8 -> 74.1.
CLUSTER_TILES_HEAVY_MAX_K = 4096


def _cluster_pairs(fmt: str, bn: int, M: int, N: int, K: int, sms: int) -> bool:
    """Whether ``M`` tokens of a ``K x N`` layer in ``bn``-token tiles (two consumer
    warpgroups: 128 features) split into exactly two parts per tile summed in a cluster:
    :func:`default_ctas` then :func:`cluster_parts`, as :func:`_run` takes them (the grid's
    fit in clusters is checked there on the device)."""
    tiles = ceil_div(M, bn) * ceil_div(N, 128)
    C = _default_grid(fmt, 2, tiles, max(1, K // engine_traits(fmt)["BK"]), K, sms=sms)
    return cluster_parts(tiles, C, 0, bn, sms=sms) == 2


def config_for(fmt: str, M: int, nbytes: int | None = None, N: int | None = None,
               sms: int | None = None) -> EngineConfig:
    """Default configuration for ``M`` tokens: the smallest token tile that holds M (256 at
    most; NestedFP8 128 below the measured bounds :data:`PROMOTE_256_MIN_M` and
    :data:`PROMOTE_256_MIN_BYTES`, where its two promotion passes per stage did not pay),
    the deepest pipeline that fits; four consumer warpgroups (more warps to hide the
    decode's latency) for tiles of at most 64 tokens (32 for NestedFP8's promotion tile, 16
    for NestedFP16's plane fragments; never for razer-g128, whose stage holds eight k-steps
    of A), two above; the batched schedule up to 32 tokens (at every tile for razer-g128; up
    to :data:`BATCHED_MAX_BN_BP` for the bit-placement formats with two warpgroups; at
    NestedFP8's 256-token tile), interleaved above (registers). With ``nbytes`` (the layer's
    weight bytes), the bit-placement formats (nvfp4, mxfp4) take two warpgroups at 64 tokens up to
    :data:`SMALL_LAYER_BYTES_64`, and they and razer-g128 take 128-token tiles for
    128 < M <= 256 up to :data:`SMALL_LAYER_BYTES_256` (more tiles to spread a small layer
    over the SMs; razer-g128 4096x4096 at M = 256, H100: 22.2 us against 26.2 us). With
    ``N`` (the layer's features) and :data:`CLUSTER_TILES`, 128 < M <= 256 takes the token
    tile of 128 or 256 whose tiles split in two parts summed in a cluster (on ``sms`` SMs,
    default the device's) when the other one's do not (:func:`_cluster_pairs`; NestedFP8's
    tile stays 128; razer and NestedFP16 take 128 only up to
    :data:`CLUSTER_TILES_HEAVY_MAX_K`, K estimated from ``nbytes``)."""
    tr = engine_traits(fmt)
    bn = next((t for t in TOKEN_TILES if t >= M), TOKEN_TILES[-1])
    promote_256 = M >= PROMOTE_256_MIN_M or (M > 512 and (nbytes is None or nbytes >= PROMOTE_256_MIN_BYTES))
    if tr["PROMOTE"] and bn == 256 and not promote_256:
        bn = 128
    wide_a = tr["A_SRC"] == "A_FRAG" and tr["BK"] > 64  # razer-g128: 8 k-steps of A per stage
    wgs4_max = _wgs4_max(fmt)
    small_fp4 = nbytes is not None and tr["A_SRC"] == "A_FRAG" and tr["BP"]
    small_256 = nbytes is not None and tr["A_SRC"] == "A_FRAG" and (tr["BP"] or tr["RESCALE"])
    if small_256 and bn == 256 and M <= 256 and nbytes <= SMALL_LAYER_BYTES_256:
        bn = 128
    if CLUSTER_TILES and N is not None and 128 < M <= 256 and not tr["PROMOTE"]:
        sms = sms or sm_count()
        alt = 384 - bn  # 128 <-> 256
        K = int((nbytes or 0) / (N * weight_bytes_per_element(fmt)))  # estimated from the bytes
        heavy = not (tr["BP"] or tr["RESCALE"]) and alt == 128 and K > CLUSTER_TILES_HEAVY_MAX_K
        if not heavy and not _cluster_pairs(fmt, bn, M, N, K, sms) and _cluster_pairs(fmt, alt, M, N, K, sms):
            bn = alt
    wgs = 4 if bn <= wgs4_max else 2
    if tr["A_SRC"] != "A_FRAG" and bn == 8:
        # NestedFP at 8 tokens: two warpgroups, twice the stages (12 x 16 KB), were faster
        # than four on 7 of the 9 benchmark shapes in both modes (H100, 2026-11-27: 1-4%)
        wgs = 2
    if small_fp4 and bn == 64 and nbytes <= SMALL_LAYER_BYTES_64:
        wgs = 2
    # razer-g128: batched at every tile since its rescaled accumulators (one tile) left the
    # registers for a whole stage of A (tuning sweep, H100: 2-8% faster at 32-4096 tokens)
    sched = 1 if (wide_a or bn <= 32 or (tr["PROMOTE"] and bn == 256)) else 0
    if tr["BP"] and wgs == 2 and bn <= BATCHED_MAX_BN_BP:
        sched = 1
    return EngineConfig(bn, max_stages(fmt, bn, wgs), wgs, sched=sched)


# --------------------------------------------------------------------------- source
@functools.lru_cache(maxsize=1)
def engine_source() -> str:
    """The engine's complete CUDA source: generated traits + PTX header + wgmma wrappers."""
    body = load_source("engine.cu", prelude=prelude() + engine_traits_header())
    return body.replace("MACTILE_GENERATED_WGMMA", wgmma_source(TOKEN_TILES))


#: Work partitions of the kernel (its ``PART`` template argument): stream-K stripes, whole-tile
#: rounds before them (:func:`whole_rounds`), equal parts summed together (:func:`split_parts`),
#: or parts summed in a cluster of each tile's CTAs (:func:`cluster_parts`).
PART_STRIPES, PART_HYBRID, PART_PARTS, PART_CLUSTER = 0, 1, 2, 3


def engine_name(fmt: str, cfg: EngineConfig, part: int = PART_STRIPES) -> str:
    """Kernel name expression of one instantiation with work partition ``part``
    (:data:`PART_STRIPES`, :data:`PART_HYBRID`, :data:`PART_PARTS` or :data:`PART_CLUSTER`);
    the early units resolved (:func:`early_units`), so that one kernel has one name."""
    return (f"mt::engine_gemm<{engine_format_id(fmt)}, {cfg.bn}, {cfg.stages}, {cfg.wgs}, {cfg.schedule}, "
            f"{int(part)}, {early_units(fmt, cfg)}>")


def _active_source(traced: bool = False) -> str:
    """The source the next launches compile from: :func:`set_source`'s, else the package's."""
    return ("#define MT_ENGINE_TRACE 1\n" if traced else "") + (_SOURCE.get("src") or engine_source())


def _kernel(fmt: str, cfg: EngineConfig, traced: bool = False, part: int = PART_STRIPES):
    src = _active_source(traced)
    return prebuilt.get_kernel(src, engine_name(fmt, cfg, part), max_dynamic_smem=smem_bytes(fmt, cfg))


def _default_grid(fmt: str, wgs: int, tiles: int, ku: int, K: int, sms: int | None = None) -> int:
    """:func:`default_ctas` for ``tiles`` tiles of ``wgs`` x 64 features and ``ku`` k-blocks
    of a ``K``-deep layer (its weight bytes per tile), at most one CTA per k-block."""
    tile_bytes = int(wgs * 64 * K * weight_bytes_per_element(fmt))
    return min(default_ctas(tiles, tiles * ku, sms=sms, tile_bytes=tile_bytes), tiles * ku)


def default_ctas(tiles: int, units: int, sms: int | None = None, tile_bytes: int | None = None) -> int:
    """Persistent CTAs for ``tiles`` output tiles of ``units`` k-blocks in all.

    * fewer tiles than SMs: every tile split into the same number of parts, ``sms // tiles``
      (at most the k-blocks of a tile) when the parts are summed by all their CTAs
      (:func:`split_parts`: each reads one tile's worth of partial sums, whatever the
      parts; 4096x256 at M = 1 in 64 parts 5.5 us against 7.1 us in 12), else at most
      ``round(sqrt(tile_bytes / 4096))`` when ``tile_bytes`` (weight bytes per tile) is
      given: the last arriver of a tile sums every other part, so its reduction grows with
      the parts while the streaming gain saturates (measured on H100 at M = 1: a 256-row
      tile of K = 4096, 0.6 MB, was fastest at 8-16 parts, 8.1-8.3 us against 17.2 us at
      128 parts; of K = 14336, 2 MB, at 16-24 parts);
    * otherwise the largest divisor of ``tiles`` that is at most ``sms``, when it keeps at
      least 90% of the SMs busy (whole tiles per CTA: no partial sums), else one CTA per
      SM (stream-K: the remainder spread over all SMs);
    * except that between half the SMs and :data:`STREAMK_IDLE` of them, where one whole
      tile per CTA would leave more than 20% of the SMs idle, stream-K takes every SM.
    """
    sms = sms or sm_count()
    if sms // tiles == 1 and tiles < STREAMK_IDLE * sms:  # whole tiles would idle > 20% of the SMs
        return min(sms, units)
    if tiles < sms:
        parts = sms // tiles
        if tile_bytes and not split_parts(tiles, tiles * min(parts, units // tiles), sms=sms):
            parts = min(parts, max(1, round(math.sqrt(tile_bytes / 4096))))
        return max(1, min(units, tiles * parts))
    best = max(d for d in range(1, sms + 1) if tiles % d == 0)
    return best if best >= 0.9 * sms else min(sms, units)


def whole_rounds(tiles: int, ku: int, n_ctas: int, act_bytes: int = 0, l2_bytes: int = 0) -> int:
    """Rounds of whole tiles before the stream-K stripes (hybrid stream-K, CUTLASS's
    data-parallel + stream-K), or 0 (pure stream-K).

    Pure stream-K over every tile starts each CTA at a different k, so together they touch
    all of K at once: when the activations (``act_bytes``, all of M x K) are a large part of
    the L2 they are re-read from HBM (25600x5120 at M = 1024: NestedFP16 0.45x, nvfp4 0.70x
    of cuBLAS). In rounds (CTA c takes tiles c, c + n_ctas, ... for ``tiles // n_ctas``
    rounds, then the ``tiles % n_ctas`` others in stripes) the CTAs work at the same k.
    Rounds are used when the tiles do not divide evenly (if they do, the stripes are whole
    tiles already), the rest can be striped with at least one k-block per CTA, and
    ``act_bytes >= HYB_L2_FRACTION x l2_bytes``: measured on the H100, the rounds lost where the
    activations were small and stream-K's order let both token tiles of a weight tile run at
    the same time (5120x25600 at M = 512: 1.24-1.31x the time; 4096x28672 FP8 at M = 256:
    1.39x), and won from 16.8 MB (8192x5120 at M = 1024) up. :data:`HYBRID` off: 0."""
    if not HYBRID or tiles < n_ctas or act_bytes < HYB_L2_FRACTION * l2_bytes:
        return 0
    rest = tiles % n_ctas
    return tiles // n_ctas if rest and rest * ku >= n_ctas else 0


def rounds_any_activations(fmt: str, bn: int, token_tiles: int) -> bool:
    """Whether a launch of ``token_tiles`` tiles of ``bn`` tokens takes whole-tile rounds
    whatever the activations' size (:data:`HYB_ONE_TOKEN_TILE`): one 256-token tile and a
    light decode (the bit-placement formats and razer-g128's rescaled accumulators)."""
    tr = engine_traits(fmt)
    light = tr["A_SRC"] == "A_FRAG" and (tr["BP"] or tr["RESCALE"])
    return HYB_ONE_TOKEN_TILE and light and bn == 256 and token_tiles == 1


def weight_bytes_per_element(fmt: str) -> float:
    """Bytes of weight storage per matrix element the engine streams for ``fmt``."""
    tr = engine_traits(fmt)
    if tr["A_SRC"] == "A_FRAG":
        return 0.5 + tr["SCALE_BYTES"] / tr["BLOCK"]
    if tr["A_SRC"] == "A_PLANES":
        return 2.0
    return 1.0 if tr["FP8"] else 2.0


# --------------------------------------------------------------------------- workspace
_WS: dict = {}


def _workspace(nfloats: int, ntiles: int):
    """FP32 partial-sum slots and per-tile arrival counters (zeroed once; the kernels return
    counters to zero), grown on demand and reused across launches (never during capture of
    a graph that a larger launch later needs: size them first)."""
    cp = require_cupy()
    dev = cp.cuda.Device().id
    ws, cnt = _WS.get(dev, (None, None))
    if ws is None or ws.size < nfloats:
        ws = cp.empty(max(nfloats, 1), dtype=cp.float32)
    if cnt is None or cnt.size < ntiles:
        cnt = cp.zeros(max(ntiles, 1), dtype=cp.int32)
    _WS[dev] = (ws, cnt)
    return ws, cnt


# --------------------------------------------------------------------------- launches
def _run(fmt: str, cfg: EngineConfig, *, tm_b, tm_a0, tm_a1, wcodes, wscales, col_scale, y, M, N,
         K_pad, RT, out_scale, lut=(0, 0, 0, 0, 0), pdl=False):
    from .launch import launch  # noqa: PLC0415

    tr = engine_traits(fmt)
    TT = ceil_div(M, cfg.bn)
    if RT % cfg.wgs:
        raise ValueError(f"{RT} row tiles of 64 are not a multiple of wgs = {cfg.wgs}")
    tiles = TT * (RT // cfg.wgs)
    units = tiles * (K_pad // tr["BK"])
    if units >= 2 ** 31:
        raise ValueError(f"{units} work units exceed the kernel's 32-bit stripe arithmetic")
    C = min(cfg.n_ctas, units) if cfg.n_ctas else _default_grid(fmt, cfg.wgs, tiles, units // tiles, K_pad)
    NF = 0
    if cfg.bn >= HYB_MIN_BN:
        act = M * K_pad * (1 if tr["FP8"] else 2)
        l2 = 0 if rounds_any_activations(fmt, cfg.bn, TT) else l2_bytes()  # 0: rounds whatever the activations
        NF = whole_rounds(tiles, units // tiles, C, act, l2)
    trace = _TRACE.get("buf")
    PC = cluster_parts(tiles, C, NF, cfg.bn)
    if PC and not clusters_fit(_kernel(fmt, cfg, part=PART_CLUSTER), cfg, fmt, PC, tiles):
        PC = 0
    P = PC or split_parts(tiles, C, NF)
    ws, cnt = _workspace(2 * C * cfg.wgs * 128 * (cfg.bn // 2), tiles)
    part = PART_CLUSTER if PC else PART_PARTS if P else PART_HYBRID if NF else PART_STRIPES
    fn = _kernel(fmt, cfg, traced=trace is not None, part=part)
    out_f32 = y.dtype == np.float32
    if trace is not None and trace.size < TRACE_SLOTS * C:
        raise ValueError(f"trace buffer holds {trace.size} stamps; this launch needs {TRACE_SLOTS * C}")
    launch(fn, (C,), ((cfg.wgs + 1) * 128,),
           (tm_b, tm_a0, tm_a1, wcodes, wscales, col_scale, y, ws, cnt, np.int32(M), np.int32(N),
            np.int32(K_pad), np.int32(RT), np.int32(TT), np.int32(C), np.int32(NF), np.int32(P), np.float32(out_scale),
            np.int32(out_f32), *(np.uint32(v) for v in lut), trace),
           shared_mem=smem_bytes(fmt, cfg), pdl=pdl, cluster=PC or 1)
    return y


#: Stamps per CTA of an engine trace, in the kernel's order (engine.cu ``TR_*``).
TRACE_FIELDS = ("entry", "ready", "first_copy", "first_data", "main_end", "end", "sm", "tiles")
TRACE_SLOTS = len(TRACE_FIELDS)
_TRACE: dict = {}
_SOURCE: dict = {}


def set_trace(buf) -> None:
    """Record the next engine launches' per-CTA phases into ``buf`` (CuPy uint64, at least
    ``TRACE_SLOTS`` x CTAs, zeroed by the caller), or stop recording (``None``). Benchmarks
    only (``benchmarks/engine_trace.py``): traced launches run a separate NVRTC build of the
    kernel with the stamps compiled in (``MT_ENGINE_TRACE``); each overwrites the same slots."""
    if buf is not None:
        cp = require_cupy()
        if not isinstance(buf, cp.ndarray) or buf.dtype != np.uint64:
            raise TypeError("set_trace: buf must be a CuPy uint64 array or None")
    _TRACE["buf"] = buf


def set_source(src: str | None) -> None:
    """Run the next engine launches from ``src``, a complete engine source as
    :func:`engine_source` returns it (another revision's, or a variant's), or from the
    package's again (``None``). Benchmarks only (``benchmarks/engine_ab.py``: same-process
    A/B of two kernels). Its kernels must take the parameters this module passes; a source
    without prebuilt cubins compiles with NVRTC."""
    if src is not None and (not isinstance(src, str) or "engine_gemm" not in src):
        raise TypeError("set_source: src must be a complete engine source (a str defining engine_gemm) or None")
    _SOURCE["src"] = src


def _out(M, N, out, out_dtype):
    cp = require_cupy()
    if out is None:
        return cp.empty((M, N), dtype=out_dtype)
    if out.shape != (M, N) or out.dtype not in (np.float16, np.float32) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float16/float32 array of shape {(M, N)}")
    return out


def activation_map(x, bn: int, fp8: bool = False):
    """Tensor map of activations ``x[M, K]`` (FP16, or E4M3 bytes) for token tiles of ``bn``."""
    from .launch import TensorMap  # noqa: PLC0415

    return TensorMap(x, (128 if fp8 else 64, bn), 128)


def gemm_fp4(x, pw, *, cfg: EngineConfig | None = None, out=None, out_dtype=np.float16, pdl=False,
             x_map=None, col_scale=None):
    """``x[M, K]`` (FP16, CuPy) times an FP4 :class:`~mactile.gpu.packing.PackedW4A16`
    (``frag`` layout): ``y[M, N]`` FP16 (or FP32), FP32 accumulation, exact products.

    ``x_map`` may pass a prebuilt :func:`activation_map` of ``x`` (benchmarks reuse it).
    ``col_scale``: an FP32 ``[M]`` factor per token applied in the epilogue, read after
    ``griddepcontrol.wait`` (W4A4: the activations' tensor scale, written on the GPU by
    the quantizer just before).
    """
    require_cupy()
    fmt = pw.fmt.name
    if x.dtype != np.float16 or x.ndim != 2 or x.shape[1] != pw.K or not x.flags.c_contiguous:
        raise ValueError(f"x must be a C-contiguous float16 [M, {pw.K}] array, got {x.dtype} {x.shape}")
    if pw.K % 8:
        raise ValueError(f"K = {pw.K}: the activation tensor map needs rows of a multiple of 16 bytes")
    M = int(x.shape[0])
    if col_scale is not None and (col_scale.dtype != np.float32 or col_scale.shape != (M,)):
        raise ValueError(f"col_scale must be a float32 array of shape ({M},), got {col_scale.dtype} {col_scale.shape}")
    cfg = cfg or config_for(fmt, M, pw.nbytes("frag"), N=pw.N)
    lay = pw.layout("frag")
    y = _out(M, pw.N, out, out_dtype)
    RT = int(lay["codes"].shape[0])
    out_scale = _fp4_out_scale(pw)
    tm_b = x_map if x_map is not None else activation_map(x, cfg.bn)
    lut = pw.fmt.lut_args
    return _run(fmt, cfg, tm_b=tm_b, tm_a0=tm_b, tm_a1=tm_b, wcodes=lay["codes"], wscales=lay["scales"],
                col_scale=col_scale, y=y, M=M, N=pw.N, K_pad=int(lay["K_pad"]), RT=RT, out_scale=out_scale,
                lut=lut, pdl=pdl)


def _fp4_out_scale(pw) -> float:
    """The FP32 factor of the engine's result: tensor scale times the decode's power of two
    (nvfp4: the bit-placement and 2^7 scale factors; razer: the FP16 prescale; mxfp4: the
    matrix's kernel-scale offset)."""
    kind = pw.fmt.scale_kind
    lay = pw.layout("frag")
    if kind is EngineScale.E4M3:
        k = pw.fmt.tc_out_log2
    elif kind is EngineScale.POW2_F16:
        k = int(lay.get("out_log2", 0))
    elif kind is EngineScale.BITS_F16:
        k = pw.fmt.f16_prescale_log2
    else:
        k = 0
    return float(np.float32(pw.tensor_scale) * np.float32(2.0 ** k))


def gemm_planes(x, upper, lower, N: int, *, cfg: EngineConfig | None = None, out=None,
                out_dtype=np.float16, pdl=False, x_map=None):
    """NestedFP FP16 mode: ``x[M, K]`` FP16 times the weights rebuilt from the byte planes
    ``upper``/``lower`` ``[Np, Kp]`` (``nestedfp.split_planes`` layout)."""
    from .launch import TensorMap  # noqa: PLC0415

    M = int(x.shape[0])
    cfg = cfg or config_for("nestedfp16", M, 2 * int(upper.nbytes), N=N)
    Np, Kp = (int(d) for d in upper.shape)
    y = _out(M, N, out, out_dtype)
    tm_b = x_map if x_map is not None else activation_map(x, cfg.bn)
    tu = TensorMap(upper, (64, cfg.wgs * 64), 64)
    tl = TensorMap(lower, (64, cfg.wgs * 64), 64)
    return _run("nestedfp16", cfg, tm_b=tm_b, tm_a0=tu, tm_a1=tl, wcodes=None, wscales=None,
                col_scale=None, y=y, M=M, N=N, K_pad=Kp, RT=Np // 64, out_scale=1.0, pdl=pdl)


def gemm_fp8(xq, xscale, upper, N: int, *, cfg: EngineConfig | None = None, out=None,
             out_dtype=np.float16, pdl=False, x_map=None):
    """NestedFP FP8 mode: per-token E4M3 activations ``xq[M, Kp]`` (bytes, the planes' K
    order) with FP32 scales ``xscale[M]`` times the upper plane as E4M3; ``y = xscale[m] *
    2**-8 * sum_k xq u`` with FP32 accumulation promoted every 128 of K."""
    from .launch import TensorMap  # noqa: PLC0415

    M = int(xq.shape[0])
    cfg = cfg or config_for("nestedfp8", M, int(upper.nbytes), N=N)
    Np, Kp = (int(d) for d in upper.shape)
    y = _out(M, N, out, out_dtype)
    tm_b = x_map if x_map is not None else activation_map(xq, cfg.bn, fp8=True)
    ta = TensorMap(upper, (128, cfg.wgs * 64), 128)
    return _run("nestedfp8", cfg, tm_b=tm_b, tm_a0=ta, tm_a1=ta, wcodes=None, wscales=None,
                col_scale=xscale, y=y, M=M, N=N, K_pad=Kp, RT=Np // 64, out_scale=2.0 ** -8, pdl=pdl)


# --------------------------------------------------------------------------- prebuild
def split_parts(tiles: int, n_ctas: int, nf: int = 0, sms: int | None = None) -> int:
    """Parts per tile summed by all of a tile's CTAs together, or 0 (the last to arrive sums).

    Applies when every tile is split into the same number ``P >= 2`` of parts, one stripe
    per CTA (``n_ctas = tiles x P``, no whole-tile rounds ``nf``): each of the ``P`` CTAs
    waits for the others and sums one P-th of the tile, reading one tile's worth of partial
    sums where the last arriver alone reads ``P - 1`` tiles. The wait needs every CTA of
    the grid resident at once: at most one CTA per SM (``sms``, default the device's).
    Fewer than :data:`PARTS_MIN` parts, or :data:`PARTS_REDUCE` off: 0."""
    if not PARTS_REDUCE or nf or tiles <= 0 or n_ctas % tiles:
        return 0
    if n_ctas > (sms or sm_count()):
        return 0
    P = n_ctas // tiles
    return P if P >= max(2, PARTS_MIN) else 0


#: Whether a launch whose tiles are each split into 2..:data:`CLUSTER_MAX_P` parts, one per
#: CTA, sums them in a cluster of the tile's CTAs through distributed shared memory
#: (:func:`cluster_parts`) rather than through the L2. A switch for A/B measurements.
CLUSTER_PARTS = True
#: Most parts (cluster size) summed in a cluster.
CLUSTER_MAX_P = 4
#: Smallest token tile summed in clusters: each CTA writes whole epilogue passes (64 tokens)
#: of the tile, at least one.
CLUSTER_MIN_BN = 128


def cluster_parts(tiles: int, n_ctas: int, nf: int, bn: int, sms: int | None = None) -> int:
    """Parts per tile summed in a cluster of the tile's CTAs (``PART_CLUSTER``), or 0: every
    tile split into the same ``P`` in 2..:data:`CLUSTER_MAX_P` parts, one stripe per CTA
    (``n_ctas = P tiles``, no whole-tile rounds ``nf``), token tiles of at least
    :data:`CLUSTER_MIN_BN` (with ``P <= bn / 64``: a whole epilogue pass per CTA), the grid at
    most one CTA per SM (``sms``, default the device's) and :data:`CLUSTER_PARTS` on. Each CTA
    sends its sums of the others' passes to their shared memory and writes its own: no
    partial sums through the L2 (docs/gpu.md note 14). The caller also checks that the GPU
    holds every cluster at once (:func:`clusters_fit`)."""
    if not CLUSTER_PARTS or nf or bn < CLUSTER_MIN_BN or tiles <= 0 or n_ctas % tiles:
        return 0
    P = n_ctas // tiles
    if not 2 <= P <= min(CLUSTER_MAX_P, bn // 64) or n_ctas > (sms or sm_count()):
        return 0
    return P


def clusters_fit(fn, cfg: EngineConfig, fmt: str, P: int, n_clusters: int) -> bool:
    """Whether the GPU holds ``n_clusters`` clusters of ``P`` CTAs of ``fmt``'s
    ``PART_CLUSTER`` kernel ``fn`` (configuration ``cfg``) at once
    (``cuOccupancyMaxActiveClusters``): a second wave of clusters would double the launch's
    time. Cached per kernel name, cluster size and device (the kernel objects themselves
    are not reused between launches, so not their identity)."""
    from .launch import max_active_clusters  # noqa: PLC0415
    cp = require_cupy()
    key = (engine_name(fmt, cfg, PART_CLUSTER), P, cp.cuda.Device().id)
    if key not in _CLUSTERS_FIT:
        _CLUSTERS_FIT[key] = max_active_clusters(fn, (cfg.wgs + 1) * 128, smem_bytes(fmt, cfg), P)
    return _CLUSTERS_FIT[key] >= n_clusters


_CLUSTERS_FIT: dict = {}


def _variants(fmt: str, bn: int) -> list[EngineConfig]:
    """The configurations tried for token tile ``bn`` (tuning), deepest pipeline each: two
    consumer warpgroups, four where they fit their registers (:func:`_wgs4_max`), and one
    for FP8 mode up to :data:`ONE_WG_MAX_BN` tokens (docs/gpu.md note 18); either
    schedule, except where it spills (compiled with nvcc 13.0, sm_90a): the batched one with
    four warpgroups above 32 tokens (164 bytes at 64) and for NestedFP16's planes at 128
    tokens and more (NestedFP8, A from shared memory, does not spill there)."""
    tr = engine_traits(fmt)
    out = []
    wgs_set = (2, 4) if bn <= _wgs4_max(fmt) else (2,)
    if tr["A_SRC"] == "A_SMEM" and bn <= ONE_WG_MAX_BN:
        wgs_set = (1,) + wgs_set
    for wgs in wgs_set:
        for sched in SCHEDULES:
            if sched == 1 and ((wgs == 4 and bn > 32) or (bn >= 128 and tr["A_SRC"] == "A_PLANES")):
                continue
            try:
                c = EngineConfig(bn, max_stages(fmt, bn, wgs), wgs, sched=sched)
            except ValueError:
                continue
            out.append(c)
    return out


def tuning_candidates(fmt: str, M: int, nbytes: int | None = None, sms: int | None = None,
                      N: int | None = None) -> list[EngineConfig]:
    """The configurations a tuning sweep times for ``M`` tokens, the default
    (:func:`config_for` with ``nbytes`` and ``N``) first: every variant of the default's token tile
    (:func:`_variants`: two or four warpgroups, one in FP8 mode, either schedule), where ``M`` launches with PDL
    (:func:`use_pdl`; without it the copies only delay the first stage's activations) those of
    the default's schedule (but four warpgroups at 32 tokens or more) with the early weight copies
    toggled (:func:`early_units`: :data:`EARLY_CANDIDATE` units where
    the rule gives none, NestedFP's planes all; none where it gives some), the defaults of half
    that tile (more token tiles: more CTAs busy on small layers, a second decode of the
    weights) for a large and a small layer, with ``N`` the default without the cluster rule
    (:data:`CLUSTER_TILES`), and the default with one CTA per SM (``sms``; stream-K over every
    SM where :func:`default_ctas` would give whole tiles). Without ``sms``, no CTA-count
    candidate (the kernels are the same: :func:`instances`)."""
    d = config_for(fmt, M, nbytes, N=N, sms=sms if N is not None else None)
    tile = [d] + _variants(fmt, d.bn)
    out = list(tile)
    if use_pdl(M):
        planes = engine_traits(fmt)["A_SRC"] != "A_FRAG"
        on = EARLY_UNITS_PLANES if planes else EARLY_CANDIDATE
        # (four warpgroups at 32 and 64 tokens spilled with the early copies: 12-52 bytes)
        out += [replace(c, early=0 if early_units(fmt, c) else on) for c in tile
                if c.schedule == d.schedule and not (c.wgs == 4 and c.bn >= 32)]
    if N is not None:  # the tile without the cluster rule (CLUSTER_TILES), where it differs
        out.append(config_for(fmt, M, nbytes))
    if d.bn // 2 >= TOKEN_TILES[0]:
        out += [config_for(fmt, d.bn // 2), config_for(fmt, d.bn // 2, 0)]
    if sms:
        out.append(replace(d, n_ctas=sms))
    seen, uniq = set(), []
    for c in out:
        key = (c.bn, c.stages, c.wgs, c.n_ctas, c.schedule, early_units(fmt, c))
        if key not in seen:
            seen.add(key)
            uniq.append(c)
    return uniq


def instances(tuning: bool = True) -> list[tuple[str, EngineConfig]]:
    """Every (format, configuration) the wrappers may launch: the default per token tile of
    every format (for a large and a small layer), the tuning table's entries and, with
    ``tuning``, every candidate a tuning sweep times (:func:`tuning_candidates`)."""
    from .tuning import engine_table_configs  # noqa: PLC0415

    out = []
    for fmt in ENGINE_FORMATS:
        for m in TOKEN_TILES + (1024, PROMOTE_256_MIN_M):  # (NestedFP8's tile changes at 1024, 2048)
            out.append((fmt, config_for(fmt, m)))
            out.append((fmt, config_for(fmt, m, nbytes=0)))  # a small layer's
            if tuning:
                out += [(fmt, c) for nb in (None, 0) for c in tuning_candidates(fmt, m, nb)]
    out += engine_table_configs()
    seen, uniq = set(), []
    for f, c in out:
        key = (f, engine_name(f, c))
        if key not in seen:
            seen.add(key)
            uniq.append((f, replace(c, n_ctas=0, sched=c.schedule, early=early_units(f, c))))
    return uniq


def prebuilt_names() -> list[str]:
    """Every prebuilt engine kernel: each instance with stream-K stripes, with whole-tile
    rounds from :data:`HYB_MIN_BN` tokens, and (the defaults and the tuning table's entries,
    not the variants only a tuning sweep times) with parts summed together and, from
    :data:`CLUSTER_MIN_BN` tokens, with parts summed in a cluster."""
    names = {engine_name(f, c, PART_STRIPES) for f, c in instances()}
    names |= {engine_name(f, c, PART_HYBRID) for f, c in instances() if c.bn >= HYB_MIN_BN}
    names |= {engine_name(f, c, PART_PARTS) for f, c in instances(tuning=False)}
    names |= {engine_name(f, c, PART_CLUSTER) for f, c in instances(tuning=False) if c.bn >= CLUSTER_MIN_BN}
    return sorted(names)


def prebuilt_jobs():
    """``[(source, [names])]`` for :func:`mactile.gpu.prebuilt.build`."""
    return [(engine_source(), prebuilt_names())]
