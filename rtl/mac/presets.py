"""The MAC presets of ``presets.yaml`` (BlockDialect Table 5), readable without Amaranth."""
from __future__ import annotations

import functools
from importlib import resources

import yaml

__all__ = ["mac_presets"]


@functools.lru_cache(maxsize=None)
def _load() -> dict:
    text = resources.files(__package__).joinpath("presets.yaml").read_text()
    return yaml.safe_load(text)


def mac_presets() -> dict[str, dict]:
    """``{design name: {"table5": row, "summary": str, "params": dict}}`` (fresh copies)."""
    return {name: {**entry, "params": dict(entry["params"])} for name, entry in _load().items()}
