"""Arguments shared by the design subcommands (``generate``, ``sim``): a design name, an
optional YAML file of parameter overrides, and any design parameter as a flag
(``--rows 8 --acc fixed --pipeline dot,scaled``; dashes and underscores are the same).
Precedence: the design's defaults, then ``--config``, then the flags."""
from __future__ import annotations

from pathlib import Path

from mactile.cli.common import CliError


def add_design_args(p) -> None:
    p.add_argument("design", metavar="DESIGN", help="design name (see `mactile list designs`)")
    p.add_argument("--config", metavar="FILE.yaml",
                   help="YAML mapping of parameter overrides (a flat mapping, or one with a "
                        "`params` mapping as in the presets files)")
    p.add_argument("--show-params", action="store_true",
                   help="print the design's parameters (defaults, then --config and flags "
                        "applied) and exit")
    p.epilog = ((p.epilog + " ") if p.epilog else "") + (
        "Every design parameter is also a flag: --NAME VALUE (VALUE read as YAML; lists "
        "comma-separated), e.g. `--rows 8 --acc fixed --pipeline dot,scaled`; "
        "--show-params lists them.")
    p.set_defaults(design_param_flags=True)


def parse_param_flags(design, extra: list[str]) -> dict:
    """``{param: value}`` from ``--name value`` pairs naming ``design``'s parameters.

    Values are read as YAML scalars (``16``, ``fixed``, ``null``, ``5.0``); where the
    default is a list, ``a,b`` is a list and ``none``/``[]`` are empty.
    """
    import yaml

    out: dict = {}
    known = {k.replace("_", "-"): k for k in design.params}
    i = 0
    while i < len(extra):
        tok = extra[i]
        if not tok.startswith("--") or len(tok) < 3:
            raise CliError(f"unexpected argument {tok!r}")
        flag, eq, val = tok[2:].partition("=")
        name = known.get(flag.replace("_", "-"))
        if name is None:
            raise CliError(f"{design.name}: unknown parameter --{flag}; parameters: "
                           + ", ".join(f"--{k}" for k in sorted(known)))
        if not eq:
            if i + 1 >= len(extra) or extra[i + 1].startswith("--"):
                raise CliError(f"--{flag} needs a value")
            val = extra[i + 1]
            i += 1
        i += 1
        try:
            if isinstance(design.params[name], (list, tuple)) and not val.lstrip().startswith("["):
                v = [] if val.strip().lower() in ("", "none") else \
                    [yaml.safe_load(x) for x in val.split(",")]
            else:
                v = yaml.safe_load(val)
        except yaml.YAMLError as e:
            raise CliError(f"--{flag}: cannot read {val!r}: {e}") from None
        out[name] = v
    return out


def load_config(path: str) -> dict:
    """Parameter overrides from a YAML file, with errors that name the file."""
    from mactile.synth.sweep.spec import SpecError, read_text_file, read_yaml

    if not str(path):
        raise CliError("config file path is empty")

    # The sweep spec's reader: a regular file of at most 1 MiB, UTF-8, bounded aliases and
    # nesting, no key given twice, one-line parse errors.
    try:
        data = read_yaml(read_text_file(Path(path), what="config file"), path)
    except SpecError as e:
        raise CliError(str(e)) from None
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
    overrides = load_config(args.config) if args.config is not None else {}
    try:
        design.resolve(**overrides)
    except (ValueError, TypeError) as e:
        raise CliError(f"{args.config}: {e}") from None
    overrides.update(parse_param_flags(design, getattr(args, "extra", [])))
    try:
        params = design.resolve(**overrides)
    except (ValueError, TypeError) as e:
        raise CliError(str(e)) from None
    if getattr(args, "show_params", False):
        import yaml

        print(yaml.safe_dump({"design": design.name, "params": params}, sort_keys=False),
              end="")
        raise SystemExit(0)
    return design, params


def build_component(design, params):
    """Build the Amaranth component, turning parameter errors into CLI errors."""
    try:
        return design.load_builder()(**params)
    except ImportError as e:
        raise CliError(f"{design.name} needs Amaranth: pip install 'mactile[sim]' ({e})") from None
    except (ValueError, TypeError) as e:
        raise CliError(f"{design.name}: {e}") from None
