"""Measured per-device tuning tables of mactile.gpu (one JSON file per device kind).

``<device>.json`` holds the measured crossover of the small-M kernels (``crossover``,
written by ``mactile bench gpu``) and the GEMM engine's configurations measured per weight
format, shape ``(K, N)`` and token count ``M`` (``engine``, written by ``mactile bench tune``,
:mod:`mactile.gpu.bench.engine_tune`: a candidate that beat the default by a margin twice, or
``"default": true`` where none did; ``"ctas_per_sm": true`` where the choice was one CTA per
SM, which the lookup turns into the current device's SM count).
:func:`engine_choice` looks up the entry of the nearest measured shape (log distance in N and
K) and the smallest measured M at or above the request within the request's token tile
(:func:`token_bucket`: 8, 16, 32, 64, 128, 256 and above); requests with no such M (M = 1..8
when the sweep began at 16, M above every measured M) and formats without entries take the
engine's default (:func:`mactile.gpu.engine.config_for`).

A device with no table of its own (:func:`resolve_table`) reads the table of its nearest
measured device (:data:`NEAREST_DEVICE`: the same chip with other memory, e.g. an H200 reads
``h100.json`` until ``h200.json`` exists) or, with none, runs the engine's defaults; which of
the three happened is logged once per process on the ``mactile.gpu`` logger (a warning for the
two fallbacks) and :func:`table_origin` returns it, so a benchmark can record it.
``mactile bench tune --tuning-out gpu/tuning/<device>.json`` writes a device's own table.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

__all__ = ["TUNING_DIR", "NEAREST_DEVICE", "device_slug", "resolve_table", "table_origin", "load_table",
           "engine_choice", "engine_table_configs", "token_bucket"]

TUNING_DIR = Path(__file__).resolve().parent
_LOG = logging.getLogger("mactile.gpu")

# A device without a table of its own reads the table of the device named here: the same chip
# (GH100, 132 SMs, the same kernels and tile limits), so the measured choices are the nearest
# there are; only the memory system differs (the H200's HBM3e reads about 1.4x faster).
NEAREST_DEVICE = {"h200": "h100", "gh200": "h100"}


def device_slug(name: str) -> str:
    """File stem of a device name ("NVIDIA H100 80GB HBM3" -> "h100")."""
    n = name.lower()
    for key in ("h200", "h100", "gh200", "b200"):
        if key in n:
            return key
    return "".join(ch if ch.isalnum() else "_" for ch in n)


def resolve_table(device: str, tuning_dir: Path = TUNING_DIR) -> tuple[Path | None, str]:
    """``(path, origin)`` of the table a device named ``device`` reads.

    Its own ``<slug>.json`` if shipped; else that of :data:`NEAREST_DEVICE`'s entry for it;
    else ``None`` (the engine's defaults). ``origin`` says which, in words.
    """
    slug = device_slug(device)
    own = tuning_dir / f"{slug}.json"
    if own.exists():
        return own, f"{own.name} (measured on this device kind)"
    near = NEAREST_DEVICE.get(slug)
    if near and (tuning_dir / f"{near}.json").exists():
        return tuning_dir / f"{near}.json", (f"{near}.json: no table measured on {device} ({slug}.json), "
                                             f"so the nearest measured device's (same chip) is used; "
                                             f"`mactile bench tune --tuning-out gpu/tuning/{slug}.json` "
                                             "measures one")
    return None, (f"no tuning table for {device} ({slug}.json) nor a nearest measured device: the "
                  f"engine's defaults run; `mactile bench tune --tuning-out gpu/tuning/{slug}.json` "
                  "measures one")


@lru_cache(maxsize=1)
def table_origin() -> tuple[str | None, str]:
    """``(path or None, origin)`` of the current device's table, logged once per process."""
    try:
        from ..runtime import device_info  # noqa: PLC0415
        name = device_info()["name"]
    except Exception:  # noqa: BLE001 - no device, no table
        return None, "no GPU: no tuning table"
    path, origin = resolve_table(name)
    (_LOG.info if path is not None and path.stem == device_slug(name) else _LOG.warning)(
        "mactile.gpu tuning table: %s", origin)
    return (str(path) if path is not None else None), origin


_TABLES: dict = {}
#: (id(table), fmt, K, N, M) -> engine_choice's answer, for the tables load_table keeps (their
#: ids stay valid: _TABLES holds them).
_CHOICES: dict = {}


def load_table(path: str | None = None) -> dict | None:
    """The table at ``path`` or the current device's (:func:`resolve_table`; None when none).

    Parsed once per file version (path, size, modification time) and shared: treat the
    returned dict as read-only. Every ``linear()`` call reads it, so that an eager layer
    pays a dictionary lookup, not a JSON parse.
    """
    if path is None:
        path = table_origin()[0]
        if path is None:
            return None
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return None
    key = (str(p), st.st_size, st.st_mtime_ns)
    t = _TABLES.get(key)
    if t is None:
        t = _TABLES[key] = json.loads(p.read_text())
    return t


def token_bucket(M: int) -> int:
    """The engine's token tile that holds ``M`` tokens (the widest for more)."""
    from ..codegen import TOKEN_TILES  # noqa: PLC0415

    return next((t for t in TOKEN_TILES if t >= M), TOKEN_TILES[-1])


def engine_choice(table: dict | None, fmt: str, K: int, N: int, M: int):
    """``(EngineConfig, reason)`` from the table's ``engine`` entries, or ``(None, reason)``
    (remembered per shape for the tables :func:`load_table` keeps)."""
    kept = table is not None and any(t is table for t in _TABLES.values())
    key = (id(table), fmt, int(K), int(N), int(M))
    if kept and key in _CHOICES:
        return _CHOICES[key]
    out = _engine_choice(table, fmt, K, N, M)
    if kept:
        _CHOICES[key] = out
    return out


def _engine_choice(table: dict | None, fmt: str, K: int, N: int, M: int):
    from ..engine import EngineConfig  # noqa: PLC0415

    entries = [e for e in (table or {}).get("engine", []) if e["format"] == fmt]
    if not entries:
        return None, "no measured engine configurations for this format/device"
    dist = lambda e: abs(math.log(e["N"] / N)) + abs(math.log(e["K"] / K))  # noqa: E731
    best = min(dist(e) for e in entries)
    near = [e for e in entries if dist(e) == best]
    # only an entry of the request's own token tile: M = 1..8 (8-token tiles) never takes the
    # configuration measured at M = 16
    above = [e for e in near if e["M"] >= M and token_bucket(e["M"]) == token_bucket(M)]
    if not above:
        return None, f"no M measured for this format/shape in the token tile of M = {M}"
    e = min(above, key=lambda e: e["M"])
    if e.get("default"):
        return None, f"the default was fastest at K={e['K']} N={e['N']} M={e['M']}"
    cfg = EngineConfig(*e["config"])
    if e.get("ctas_per_sm"):  # measured as one CTA per SM: this device's count
        from ..runtime import sm_count  # noqa: PLC0415
        cfg = replace(cfg, n_ctas=sm_count())
    return cfg, f"measured at K={e['K']} N={e['N']} M={e['M']}"


def engine_table_configs() -> list:
    """Every (format, EngineConfig) named by a shipped table (they are prebuilt)."""
    from ..engine import EngineConfig  # noqa: PLC0415

    out = []
    for p in sorted(TUNING_DIR.glob("*.json")):
        try:
            t = json.loads(p.read_text())
        except ValueError:
            continue
        for e in t.get("engine", []):
            if not e.get("default"):
                out.append((e["format"], EngineConfig(*e["config"])))
    return out
