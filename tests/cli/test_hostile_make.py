"""The newcomer's `make clean`: the folders it removes come from the environment
(MACTILE_SIM_BUILD, MACTILE_CACHE_DIR, XDG_CACHE_HOME), so a folder that holds more than
mactile's files (/, the home folder, the checkout or a folder above it) is refused with exit
status 2 and nothing is removed. Before: ``MACTILE_CACHE_DIR=$HOME make clean`` removed the
home folder.

Each case runs the project's Makefile with ``make -C`` in a scratch folder (its ``.venv``,
``out`` and caches are the scratch folder's, never the checkout's) and a scratch HOME.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def snapshot(folder):
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))


@pytest.fixture
def d(tmp_path):
    for sub in ("home/keep", "work/.venv", "work/out", "work/sb/x", "work/cache/runs", "xdg/mactile"):
        (tmp_path / sub).mkdir(parents=True)
    (tmp_path / "home/keep/precious").write_text("x")
    return tmp_path


def make_clean(d, **env):
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("MACTILE_") and k != "XDG_CACHE_HOME"}
    base.update(HOME=str(d / "home"), **env)
    return subprocess.run(["make", "-s", "-f", str(MAKEFILE), "-C", str(d / "work"), "clean"],
                          env=base, capture_output=True, text=True, timeout=60)


REFUSED = [
    ("cache-is-home", dict(MACTILE_CACHE_DIR="{d}/home"), "{d}/home"),
    ("cache-is-root", dict(MACTILE_CACHE_DIR="/"), "/"),
    ("sim-build-is-here", dict(MACTILE_SIM_BUILD="."), "."),
    ("sim-build-is-above", dict(MACTILE_SIM_BUILD=".."), ".."),
    ("cache-is-above", dict(MACTILE_CACHE_DIR="{d}"), "{d}"),
    ("xdg-is-above-home", dict(XDG_CACHE_HOME="{d}/home/..", MACTILE_CACHE_DIR="{d}/home"),
     "{d}/home"),
    ("home-through-a-symlink", dict(MACTILE_CACHE_DIR="{d}/link"), "{d}/link"),
]


@pytest.mark.parametrize("env, shown", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_make_clean_refuses_folders_beyond_mactile(d, env, shown):
    (d / "link").symlink_to(d / "home")
    env = {k: v.replace("{d}", str(d)) for k, v in env.items()}
    before = snapshot(d)
    r = make_clean(d, MACTILE_SIM_BUILD=env.pop("MACTILE_SIM_BUILD", "sb"), **env)
    assert r.returncode == 2, r.stderr
    assert f"make clean: refusing to remove '{shown.replace('{d}', str(d))}'" in r.stderr
    assert "it holds more than mactile's files; nothing removed" in r.stderr
    assert snapshot(d) == before, "something was removed"


def test_make_clean_removes_its_own_folders(d):
    r = make_clean(d, MACTILE_SIM_BUILD="sb", MACTILE_CACHE_DIR=str(d / "work/cache"))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (d / "work").iterdir()) == []
    assert (d / "home/keep/precious").exists()


def test_make_clean_default_cache_under_xdg(d):
    r = make_clean(d, MACTILE_SIM_BUILD="sb", XDG_CACHE_HOME=str(d / "xdg"))
    assert r.returncode == 0, r.stderr
    assert not (d / "xdg/mactile").exists() and (d / "xdg").exists()


def test_make_help_names_the_two_first_commands():
    r = subprocess.run(["make", "-s", "-f", str(MAKEFILE), "help"], capture_output=True,
                       text=True, timeout=60, cwd=MAKEFILE.parent)
    assert r.returncode == 0 and "make demo" in r.stdout and "make test " in r.stdout
