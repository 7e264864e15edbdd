"""Library resolution, gzip cache and the errors for bad liberty input."""
import gzip

import pytest

from mactile.synth.libraries import (PDKS, LibraryError, load_library, pdk_dir,
                                     resolve_library)
from conftest import library


def test_default_is_osu018(osu018):
    lib = resolve_library()
    assert lib.name == "osu018" and lib.path == osu018.path
    assert "DFFPOSX1" in lib.cells and lib.dont_use == ()


@pytest.mark.parametrize("name", ["nangate45", "sky130"])
def test_shared_pdk_gzip_is_decompressed_once(name, _private_cache):
    lib = library(name)
    assert lib.source.name.endswith(".gz")
    assert lib.path.suffix == ".lib" and _private_cache in lib.path.parents
    assert b"library" in lib.path.read_bytes()[:4096] and not lib.path.read_bytes(
    ).startswith(b"\x1f\x8b")
    mtime = lib.path.stat().st_mtime_ns
    again = resolve_library(name)
    assert again.path == lib.path and again.path.stat().st_mtime_ns == mtime
    assert again.sha256 == lib.sha256


def test_sky130_never_maps_to_isolation_or_probe_cells():
    lib = library("sky130")
    assert lib.dont_use == PDKS["sky130"].dont_use
    assert any("lpflow_inputiso" in c for c in lib.cells)  # they are in the file ...
    assert "-dont_use *lpflow*" in lib.dont_use_args()    # ... and excluded


def test_pdk_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MACTILE_PDK_DIR", str(tmp_path))
    assert pdk_dir() == tmp_path
    with pytest.raises(LibraryError, match="nangate45_typ.lib.gz.*not found.*MACTILE_PDK_DIR"):
        resolve_library("nangate45")


@pytest.mark.parametrize("setup, match", [
    (lambda d: d / "missing.lib", "does not exist"),
    (lambda d: d, "is a directory"),
    (lambda d: (d / "x.lib").write_text("hello\n") and d / "x.lib", "not a liberty file"),
    (lambda d: (d / "x.lib.gz").write_bytes(b"\x1f\x8bnot really gzip") and d / "x.lib.gz",
     "cannot decompress"),
    (lambda d: (d / "e.lib").write_text("library (empty) {\n}\n") and d / "e.lib",
     "defines no cells"),
])
def test_bad_liberty_files(tmp_path, setup, match):
    path = setup(tmp_path)
    with pytest.raises(LibraryError, match=match):
        load_library(path)


def test_gzipped_user_liberty(tmp_path, osu018):
    gz = tmp_path / "mine.lib.gz"
    gz.write_bytes(gzip.compress(osu018.path.read_bytes()))
    lib = resolve_library(liberty=gz)
    assert lib.name == "mine" and lib.sha256 == osu018.sha256


def test_option_errors():
    with pytest.raises(LibraryError, match="unknown PDK 'tsmc28'; known: osu018, nangate45, sky130"):
        resolve_library("tsmc28")
    with pytest.raises(LibraryError, match="either --pdk or --liberty"):
        resolve_library("osu018", "/x.lib")
