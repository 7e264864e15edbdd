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
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

__all__ = ["TUNING_DIR", "device_slug", "load_table", "engine_choice", "engine_table_configs", "token_bucket"]

TUNING_DIR = Path(__file__).resolve().parent


def device_slug(name: str) -> str:
    """File stem of a device name ("NVIDIA H100 80GB HBM3" -> "h100")."""
    n = name.lower()
    for key in ("h200", "h100", "gh200", "b200"):
        if key in n:
            return key
    return "".join(ch if ch.isalnum() else "_" for ch in n)


@lru_cache(maxsize=8)
def load_table(path: str | None = None) -> dict | None:
    """The table at ``path`` or the current device's (None when there is none)."""
    if path is None:
        try:
            from ..runtime import device_info  # noqa: PLC0415
            path = str(TUNING_DIR / f"{device_slug(device_info()['name'])}.json")
        except Exception:  # noqa: BLE001 - no device, no table
            return None
    p = Path(path)
    if not p.exists():
        return None
    return json.loads(p.read_text())


def token_bucket(M: int) -> int:
    """The engine's token tile that holds ``M`` tokens (the widest for more)."""
    from ..codegen import TOKEN_TILES  # noqa: PLC0415

    return next((t for t in TOKEN_TILES if t >= M), TOKEN_TILES[-1])


def engine_choice(table: dict | None, fmt: str, K: int, N: int, M: int):
    """``(EngineConfig, reason)`` from the table's ``engine`` entries, or ``(None, reason)``."""
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
