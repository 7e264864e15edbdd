"""Measured per-device tuning tables of mactile.gpu (one JSON file per device kind).

``<device>.json`` holds the measured crossover of the small-M kernels (written by
``mactile bench gpu``, its ``_tuning.json``) and may hold, per weight format, shape ``(K, N)``
and token count ``M``, an ``engine`` entry: a GEMM-engine configuration that beat the default
in a timed sweep (``benchmarks/engine_trial.py --alts``; entries are added by hand, and the
shipped tables have none: the alternatives were within the run-to-run spread). :func:`engine_choice` looks up the entry of the
nearest measured shape (log distance in N and K) and the smallest measured M at or above the
request; without a table the engine's default (:func:`mactile.gpu.engine.config_for`) is used.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

__all__ = ["TUNING_DIR", "device_slug", "load_table", "engine_choice", "engine_table_configs"]

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


def engine_choice(table: dict | None, fmt: str, K: int, N: int, M: int):
    """``(EngineConfig, reason)`` from the table's ``engine`` entries, or ``(None, reason)``."""
    from ..engine import EngineConfig  # noqa: PLC0415

    entries = [e for e in (table or {}).get("engine", []) if e["format"] == fmt]
    if not entries:
        return None, "no measured engine configurations for this format/device"
    dist = lambda e: abs(math.log(e["N"] / N)) + abs(math.log(e["K"] / K))  # noqa: E731
    best = min(dist(e) for e in entries)
    near = [e for e in entries if dist(e) == best]
    above = [e for e in near if e["M"] >= M]
    e = min(above, key=lambda e: e["M"]) if above else max(near, key=lambda e: e["M"])
    return EngineConfig(*e["config"]), f"measured at K={e['K']} N={e['N']} M={e['M']}"


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
            out.append((e["format"], EngineConfig(*e["config"])))
    return out
