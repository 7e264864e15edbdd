"""Map the top-level folders onto the ``mactile`` import namespace.

The repository keeps one folder per layer (``golden/``, ``rtl/``, ``sim/``, ``gpu/``,
``synth/``) so the architecture is visible at a glance; they install as
``mactile.golden``, ``mactile.rtl`` and so on. There are no bare top-level modules.
"""
from setuptools import find_packages, setup

LAYERS = ("golden", "rtl", "sim", "gpu", "synth")

package_dir = {"mactile": "mactile"}
packages = ["mactile"] + [f"mactile.{p}" for p in find_packages("mactile")]
for layer in LAYERS:
    package_dir[f"mactile.{layer}"] = layer
    packages.append(f"mactile.{layer}")
    packages += [f"mactile.{layer}.{p}" for p in find_packages(layer)]
# Folders of data files only (no __init__.py), shipped through package-data: listed as
# packages so that setuptools does not warn that they are absent from `packages`.
packages.append("mactile.synth.scripts")

setup(packages=packages, package_dir=package_dir)
