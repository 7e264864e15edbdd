"""Arguments shared by the design subcommands (``generate``, ``sim``): a design name and
an optional YAML file of parameter overrides."""
from __future__ import annotations

from pathlib import Path

from mactile.cli.common import CliError


def add_design_args(p) -> None:
    p.add_argument("design", metavar="DESIGN", help="design name (see `mactile list designs`)")
    p.add_argument("--config", metavar="FILE.yaml",
                   help="YAML mapping of parameter overrides (a flat mapping, or one with a "
                        "`params` mapping as in the presets files)")


def load_config(path: str) -> dict:
    """Parameter overrides from a YAML file, with errors that name the file."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise CliError(f"config file {path!r} does not exist" if not p.exists()
                       else f"config {path!r} is not a file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise CliError(f"cannot parse {path!r} as YAML: {e}") from None
    if data is None:
        return {}
    if isinstance(data, dict) and isinstance(data.get("params"), dict):
        data = data["params"]
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise CliError(f"{path!r} must hold a mapping of parameter names to values")
    return data


def resolve_design(args):
    """``(Design, parameters)`` from ``args.design`` and ``args.config``."""
    from mactile.rtl.registry import get_design

    try:
        design = get_design(args.design)
    except ValueError as e:
        raise CliError(str(e)) from None
    overrides = load_config(args.config) if args.config else {}
    try:
        params = design.resolve(**overrides)
    except ValueError as e:
        raise CliError(f"{args.config}: {e}") from None
    return design, params


def build_component(design, params):
    """Build the Amaranth component, turning parameter errors into CLI errors."""
    try:
        return design.load_builder()(**params)
    except ImportError as e:
        raise CliError(f"{design.name} needs Amaranth: pip install 'mactile[sim]' ({e})") from None
    except (ValueError, TypeError) as e:
        raise CliError(f"{design.name}: {e}") from None
