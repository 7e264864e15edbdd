"""The sweep spec (YAML): which designs, over which parameters, libraries and clocks, and
what to measure; expanded into :class:`Job` objects.

A spec::

    name: mac-zoo                      # names the sweep (reports, plots)
    libraries: [osu018, nangate45]     # default for every design
    clocks_ns: [10, 5]                 # default for every design
    measure:                           # what each job measures (all optional)
      workload: sim                    # activity for power: sim | ports | global
      cycles: 2000                     # stimulus cycles (sim, ports)
      seed: 20261122
      equivalence: true                # prove every netlist equivalent to its RTL
      timeout_s: 1800                  # limit on each tool run of a job
    search: {method: grid}             # or {method: random, budget: 20, seed: 1}
    cluster: tcp://host:8786           # optional: a Dask scheduler (else a local pool)
    workers: 2                         # local pool size (default: the usable CPUs)
    designs:
      - design: mac-int4               # a registry design (`mactile list designs`)
        family: mac                    # plots and tables group by family (default: the
                                       #   design's group)
        params: {terms: 32}            # fixed overrides of its defaults
        grid: {product_register: [false, true]}   # axes: every value is one point
        libraries: [...]               # per-design overrides of the two defaults
        clocks_ns: [...]
        ops_per_cycle: 1               # operations per clock (energy per op); default
                                       #   from the design (:func:`ops_per_cycle`)

A grid value that is itself a list (a tensor core's ``pipeline: [dot, scaled]``) is one
point: ``grid: {pipeline: [[dot], [dot, scaled]]}``. ``search: random`` draws ``budget``
points (without replacement, from ``seed``) out of the whole product of every design's
grid, libraries and clocks, so that a resumed sweep draws the same points.

Every job has an id: a hash of what determines its result besides the code (design,
resolved parameters, library, clock, measurement options). The results database keys
its rows by it; the synthesis cache below (:mod:`mactile.synth.flow`) keys its runs by
the RTL text, the liberty's contents, the scripts and the tool versions.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import math
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SpecError", "Measure", "Job", "Spec", "load_spec", "parse_spec", "ops_per_cycle",
           "preflight", "read_yaml",
           "WORKLOADS"]

#: Activity methods a spec may name as its workload (see :mod:`mactile.synth.activity`;
#: ``vcd`` needs an OpenSTA with ``read_vcd`` and is chosen by ``auto`` where present).
WORKLOADS = ("sim", "ports", "global", "auto")
#: Search methods.
SEARCHES = ("grid", "random")

_TOP_KEYS = {"name", "description", "libraries", "clocks_ns", "measure", "search", "cluster",
             "workers", "designs"}
_DESIGN_KEYS = {"design", "builder", "name", "family", "params", "grid", "libraries",
                "clocks_ns", "ops_per_cycle", "op"}
_MEASURE_KEYS = {"workload", "cycles", "seed", "equivalence", "timeout_s", "global_activity"}

#: Bounds that keep a spec's expansion and its jobs finite (each named in its message).
#: A spec file is read whole: larger ones are refused before parsing.
MAX_SPEC_BYTES = 1 << 20
#: YAML aliases (``*name``) a spec may use: each may stand for a whole tree, so a few
#: kilobytes of nested aliases ("billion laughs") would otherwise expand to gigabytes.
MAX_ALIASES = 1000
#: Values of the spec counted as if every alias were a copy (what expanding it costs).
MAX_SPEC_NODES = 100_000
#: Nesting depth of the spec's mappings and lists.
MAX_DEPTH = 64
#: Jobs a grid may expand to, and that a random search may draw (its budget).
MAX_JOBS = 100_000
#: Configurations a random search may draw from (the product is never built).
MAX_POINTS = 10 ** 15
#: Clock periods (ns), the limit on each tool run (s, 7 days) and stimulus cycles.
MAX_CLOCK_NS = 1e6
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_CYCLES = 10 ** 7

# YAML 1.2's floats (PyYAML reads YAML 1.1, where `1e1` and `1.5e3` are strings).
_FLOAT_12 = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")


class SpecError(ValueError):
    """A spec that cannot be run; the message names the file and the entry."""


@dataclass(frozen=True)
class Measure:
    """What every job of a sweep measures (the spec's ``measure:``).

    Parameters
    ----------
    workload : str
        Activity for power (:data:`WORKLOADS`): ``sim`` simulates the netlist under the
        design's own testbench stimulus (its ``random`` suite) and counts every net's
        toggles; ``ports`` propagates the stimulus' input rates; ``global`` is vectorless.
    cycles, seed : int
        Stimulus length and seed.
    equivalence : bool
        Prove each netlist equivalent to its RTL (off: faster, figures marked unproven).
    timeout_s : float
        Limit on each tool run of a job; a job that runs past it is recorded as ``timeout``.
    global_activity : float
        Toggles per cycle of every net for ``workload: global``.
    """

    workload: str = "sim"
    cycles: int = 2000
    seed: int = 20261122
    equivalence: bool = True
    timeout_s: float = 1800.0
    global_activity: float = 0.1


@dataclass(frozen=True)
class Job:
    """One configuration: a design with parameters on a library at a clock.

    ``builder`` is empty for a registry design; otherwise ``"module:callable"`` taking
    the parameters as keywords (a design of one's own, importable on every worker).
    """

    design: str
    family: str
    params: dict
    pdk: str
    clock_ns: float
    measure: Measure
    builder: str = ""
    ops_per_cycle: float = 1.0
    op: str = "MAC"
    #: The parameters the spec set (fixed and swept), for labels and table columns.
    overrides: dict = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        """Hash of everything that determines the job's result besides the code."""
        key = {"design": self.design, "builder": self.builder, "params": self.params,
               "pdk": self.pdk, "clock_ns": float(self.clock_ns), "measure": asdict(self.measure)}
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()
                              ).hexdigest()[:16]

    def to_dict(self) -> dict:
        """Plain data (what travels to a worker and into the database)."""
        d = asdict(self)
        d["job_id"] = self.job_id
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        d = {k: v for k, v in d.items() if k != "job_id"}
        d["measure"] = Measure(**d["measure"])
        return cls(**d)

    def label(self) -> str:
        """Short text for progress lines: design, the parameters, library, clock."""
        return f"{self.design} {_short(self.overrides)} {self.pdk} {self.clock_ns:g}ns"


def _short(params: dict) -> str:
    return ",".join(f"{k}={_fmt_val(v)}" for k, v in params.items()) or "-"


def _fmt_val(v) -> str:
    if isinstance(v, (list, tuple)):
        return "+".join(map(str, v)) or "none"
    return str(v)


@dataclass(frozen=True)
class Spec:
    """A parsed spec: its jobs and how to run them."""

    name: str
    jobs: tuple[Job, ...]
    search: dict
    cluster: str | None = None
    workers: int | None = None
    description: str = ""
    text: str = ""
    source: str = ""
    total_points: int = 0
    axes: dict = field(default_factory=dict)


def ops_per_cycle(design: str, params: dict) -> tuple[float, str]:
    """Operations per clock cycle of a registry design, and what an operation is.

    A MAC unit does one multiply-accumulate a cycle; a ``rows x cols`` tensor core
    ``rows * cols`` (one beat of ``cols`` products per row); the block quantizers and the
    dequantizer one block of ``block_size`` elements; a decoder ``lanes`` elements; the
    FP32 adder one addition. A spec's ``ops_per_cycle``/``op`` override these.
    """
    if "rows" in params and "cols" in params:
        return float(params["rows"] * params["cols"]), "MAC"
    if design.startswith("mac-") or {"a_format", "w_format"} <= set(params):
        return 1.0, "MAC"
    if "block_size" in params:
        return float(params["block_size"]), "element"
    if "lanes" in params:
        return float(params["lanes"]), "element"
    return 1.0, "operation"


def load_spec(path: str | Path, *, search: dict | None = None) -> Spec:
    """Read and check a spec file (:class:`SpecError` names the file and entry).

    ``search`` replaces the spec's ``search:`` (``mactile sweep --random N``)."""
    p = Path(path)
    text = read_text_file(p, what="sweep spec")
    data = read_yaml(text, str(p))
    if search is not None and isinstance(data, dict):
        data = {**data, "search": search}
    return parse_spec(data, source=str(p), text=text)


def read_text_file(p: Path, *, what: str) -> str:
    """The text of a YAML input file (a sweep spec, a design's ``--config``): a regular file
    (no device or FIFO, which would block or never end) of at most :data:`MAX_SPEC_BYTES`,
    UTF-8 text; :class:`SpecError` naming ``what`` and the path otherwise."""
    p = Path(p)
    if not p.exists():
        raise SpecError(f"{what} {str(p)!r} does not exist")
    if not p.is_file():
        raise SpecError(f"{what} {str(p)!r} is not a file")
    if p.stat().st_size > MAX_SPEC_BYTES:
        raise SpecError(f"{what} {str(p)!r} is {p.stat().st_size} bytes; a spec may have "
                        f"at most {MAX_SPEC_BYTES} (limit MAX_SPEC_BYTES)")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{what} {str(p)!r} is not a text (YAML) file") from None


def read_yaml(text: str, source: str = "<spec>"):
    """Parse YAML text with bounded expansion and YAML 1.2 floats.

    Refuses (:class:`SpecError`) more than :data:`MAX_ALIASES` aliases, a document that
    would hold more than :data:`MAX_SPEC_NODES` values were every alias a copy, nesting
    deeper than :data:`MAX_DEPTH`, and a recursive alias; reads ``1e1`` and ``1.5e-3`` as
    numbers (YAML 1.2), where PyYAML's YAML 1.1 reads them as strings.
    """
    import yaml

    class Loader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                Loader.aliases += 1
                if Loader.aliases > MAX_ALIASES:
                    raise SpecError(f"{source}: more than {MAX_ALIASES} YAML aliases (*name); "
                                    f"a spec this large is refused (limit MAX_ALIASES)")
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            # A key given twice is refused (PyYAML keeps the last one silently); keys merged
            # in with `<<` may be overridden, as YAML says.
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                        key_node, yaml.ScalarNode):
                    continue
                k = key_node.value
                if k in seen:
                    raise SpecError(f"{source}: line {key_node.start_mark.line + 1}: key "
                                    f"{k!r} is given twice (first on line {seen[k]}); give "
                                    f"each key once")
                seen[k] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
    try:
        data = yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        # One line: PyYAML's message spans several, with the offending text quoted.
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise SpecError(f"cannot parse {source!r} as YAML: {problem}{where}") from None
    except RecursionError:
        raise SpecError(f"{source}: nested too deeply to read (limit {MAX_DEPTH} levels)"
                        ) from None
    _count_nodes(data, source)
    return data


def _count_nodes(data, source: str) -> int:
    """Values of ``data`` counting every shared (aliased) subtree as often as it is used;
    refuses beyond the limits without expanding anything (each subtree is sized once)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(obj, depth: int) -> int:
        if not isinstance(obj, (dict, list)):
            return 1
        key = id(obj)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise SpecError(f"{source}: a YAML alias refers to itself (a recursive "
                            f"structure); a spec must be a tree")
        if depth > MAX_DEPTH:
            raise SpecError(f"{source}: nested deeper than {MAX_DEPTH} levels (limit "
                            f"MAX_DEPTH)")
        active.add(key)
        items = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
        n = 1
        for v in items:
            n += size(v, depth + 1)
            if n > MAX_SPEC_NODES:
                raise SpecError(f"{source}: the spec expands to more than {MAX_SPEC_NODES} "
                                f"values once its aliases are copied (limit MAX_SPEC_NODES)")
        active.discard(key)
        sizes[key] = n
        return n

    return size(data, 0)


def _err(source: str, where: str, msg: str) -> SpecError:
    return SpecError(f"{source}: {where}: {msg}" if where else f"{source}: {msg}")


def _list(source, where, value, kind, check=None):
    """A non-empty list of ``kind`` (a scalar is a list of one)."""
    if not isinstance(value, list):
        value = [value]
    if not value:
        raise _err(source, where, "must not be empty")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, kind):
            raise _err(source, where, f"expected {_kind_name(kind)} values, got {v!r}")
        if check:
            check(v)
        out.append(v)
    if len(set(map(repr, out))) != len(out):
        raise _err(source, where, f"repeated values in {out}")
    return out


def _kind_name(kind) -> str:
    if kind is str:
        return "string"
    return "number"


def _measure(source: str, raw) -> Measure:
    if raw is None:
        return Measure()
    if not isinstance(raw, dict):
        raise _err(source, "measure", f"must be a mapping, got {raw!r}")
    unknown = set(raw) - _MEASURE_KEYS
    if unknown:
        raise _err(source, "measure", f"unknown key(s) {sorted(unknown)}; known: "
                   f"{sorted(_MEASURE_KEYS)}")
    m = dict(raw)
    if "workload" in m and m["workload"] not in WORKLOADS:
        raise _err(source, "measure.workload", f"must be one of {', '.join(WORKLOADS)}, got "
                   f"{m['workload']!r}")
    for k, lo, hi in (("cycles", 2, MAX_CYCLES), ("seed", 0, 2 ** 63 - 1)):
        if k in m and (isinstance(m[k], bool) or not isinstance(m[k], int)
                       or not lo <= m[k] <= hi):
            raise _err(source, f"measure.{k}", f"must be an integer in [{lo}, {hi}], got "
                       f"{m[k]!r}")
    if "equivalence" in m and not isinstance(m["equivalence"], bool):
        raise _err(source, "measure.equivalence", f"must be true or false, got "
                   f"{m['equivalence']!r}")
    for k, lo, hi in (("timeout_s", 0.0, MAX_TIMEOUT_S), ("global_activity", 0.0, 2.0)):
        if k in m:
            v = m[k]
            if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                    or not (lo < v <= hi if k == "timeout_s" else lo <= v <= hi)):
                raise _err(source, f"measure.{k}", f"must be a number in "
                           f"{f'(0, {hi:g}]' if k == 'timeout_s' else '[0, 2]'}, got {v!r}")
            m[k] = float(v)
    return Measure(**m)


def _positive_clock(source, where):
    def check(v):
        if not (math.isfinite(v) and v > 0):
            raise _err(source, where, f"clock periods must be positive ns, got {v!r}")
        if v > MAX_CLOCK_NS:
            raise _err(source, where, f"clock periods must be at most {MAX_CLOCK_NS:g} ns "
                       f"(1 ms), got {v!r}")
    return check


def parse_spec(data: Any, *, source: str = "<spec>", text: str = "") -> Spec:
    """Check a spec (already read from YAML) and expand it into jobs.

    Raises
    ------
    SpecError
        Anything that would make a job fail before it starts: unknown keys, designs,
        parameters, libraries; empty or repeated axes; a value of the wrong kind.
    """
    from mactile.synth.libraries import PDKS

    if not isinstance(data, dict):
        raise _err(source, "", "a sweep spec must be a YAML mapping with a `designs:` list")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise _err(source, "", f"unknown key(s) {sorted(unknown)}; known: {sorted(_TOP_KEYS)}")
    name = data.get("name") or Path(source).stem
    if not isinstance(name, str):
        raise _err(source, "name", f"must be a string, got {name!r}")
    measure = _measure(source, data.get("measure"))
    check_pdk = _pdk_check(source, PDKS)
    libs = _list(source, "libraries", data.get("libraries", ["osu018"]), str,
                 check_pdk("libraries"))
    clocks = [float(c) for c in _list(source, "clocks_ns", data.get("clocks_ns", [10.0]),
                                      (int, float), _positive_clock(source, "clocks_ns"))]
    search = _search(source, data.get("search"))
    cluster = data.get("cluster")
    if cluster is not None and (not isinstance(cluster, str) or "://" not in cluster):
        raise _err(source, "cluster", f"must be a scheduler address like tcp://HOST:8786, "
                   f"got {cluster!r}")
    if cluster is not None:
        from .executor import check_cluster_address

        try:
            check_cluster_address(cluster)
        except ValueError as e:
            raise _err(source, "cluster", str(e).removeprefix("--cluster: ")) from None
    workers = data.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or not 1 <= workers <= 1024):
        raise _err(source, "workers", f"must be an integer in [1, 1024], got {workers!r}")
    designs = data.get("designs")
    if not isinstance(designs, list) or not designs:
        raise _err(source, "designs", "must be a non-empty list of designs to sweep")

    entries = [_design_entry(source, f"designs[{i}]", entry, libs, clocks, measure, check_pdk)
               for i, entry in enumerate(designs)]
    axes = {e.where: e.axes for e in entries}
    # The product is sized before anything is built: a grid runs every point (bounded by
    # MAX_JOBS); a random search draws indices into it and builds only the drawn jobs.
    total = sum(e.size for e in entries)
    if search["method"] == "grid":
        if total > MAX_JOBS:
            raise _err(source, "designs", f"the grid expands to {total} jobs, more than "
                       f"{MAX_JOBS} (limit MAX_JOBS); narrow it, or draw from it with "
                       f"search: {{method: random, budget: N}} (--random N)")
        picked = range(total)
    else:
        if total > MAX_POINTS:
            raise _err(source, "designs", f"the spec spans {total} configurations, more "
                       f"than a random search draws from ({MAX_POINTS:.0e}, limit MAX_POINTS)")
        rng = random.Random(search["seed"])
        picked = sorted(rng.sample(range(total), min(search["budget"], total)))
    chosen = [_job_at(source, entries, i) for i in picked]
    ids = {}
    for j in chosen:
        if j.job_id in ids:
            raise _err(source, "designs", f"the same configuration twice ({j.label()})")
        ids[j.job_id] = j
    return Spec(name=name, jobs=tuple(chosen), search=search, cluster=cluster, workers=workers,
                description=str(data.get("description", "")), text=text, source=source,
                total_points=total, axes=axes)


def _pdk_check(source, pdks):
    def make(where):
        def check(v):
            if v not in pdks:
                raise _err(source, where, f"unknown library {v!r}; known: {', '.join(pdks)}")
        return check
    return make


def _search(source: str, raw) -> dict:
    if raw is None:
        return {"method": "grid"}
    if isinstance(raw, str):
        raw = {"method": raw}
    if not isinstance(raw, dict):
        raise _err(source, "search", f"must be a mapping like {{method: random, budget: 20}}, "
                   f"got {raw!r}")
    unknown = set(raw) - {"method", "budget", "seed"}
    if unknown:
        raise _err(source, "search", f"unknown key(s) {sorted(unknown)}; known: budget, "
                   f"method, seed")
    method = raw.get("method", "grid")
    if method not in SEARCHES:
        raise _err(source, "search.method", f"must be one of {', '.join(SEARCHES)}, got "
                   f"{method!r} (Optuna is not wired in: use random with a budget)")
    if method == "grid":
        if set(raw) - {"method"}:
            raise _err(source, "search", "budget and seed apply to method: random only")
        return {"method": "grid"}
    budget = raw.get("budget")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise _err(source, "search.budget", f"random search needs a budget: an integer >= 1 "
                   f"(jobs to draw), got {budget!r}")
    if budget > MAX_JOBS:
        raise _err(source, "search.budget", f"a random search draws at most {MAX_JOBS} jobs "
                   f"(limit MAX_JOBS), got {budget}")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise _err(source, "search.seed", f"must be an integer, got {seed!r}")
    return {"method": "random", "budget": budget, "seed": seed}


def _design_entry(source, where, entry, libs, clocks, measure, check_pdk) -> "_Entry":
    if not isinstance(entry, dict):
        raise _err(source, where, f"must be a mapping with a `design:` name, got {entry!r}")
    unknown = set(entry) - _DESIGN_KEYS
    if unknown:
        raise _err(source, where, f"unknown key(s) {sorted(unknown)}; known: "
                   f"{sorted(_DESIGN_KEYS)}")
    builder = entry.get("builder", "")
    if "design" in entry and "builder" in entry:
        raise _err(source, where, "has both `design:` (a registry design) and `builder:` (a "
                   "generator of one's own); give one of them (a builder's entry names its "
                   "design with `name:`)")
    name = entry.get("design") or entry.get("name")
    if not isinstance(name, str) or not name:
        raise _err(source, where, "needs `design: NAME` (a registry design) or `builder: "
                   "module:callable` with `name: NAME`")
    fixed = entry.get("params") or {}
    grid = entry.get("grid") or {}
    for key, val in (("params", fixed), ("grid", grid)):
        if not isinstance(val, dict) or not all(isinstance(k, str) for k in val):
            raise _err(source, f"{where}.{key}", f"must be a mapping of parameter names, got "
                       f"{val!r}")
    both = set(fixed) & set(grid)
    if both:
        raise _err(source, where, f"parameter(s) {sorted(both)} both fixed (params) and swept "
                   f"(grid)")
    for k, vals in grid.items():
        if not isinstance(vals, list) or not vals:
            raise _err(source, f"{where}.grid.{k}", f"must be a non-empty list of values, got "
                       f"{vals!r}")
        if len({json.dumps(v, sort_keys=True, default=str) for v in vals}) != len(vals):
            raise _err(source, f"{where}.grid.{k}", f"repeated values in {vals}")

    family = entry.get("family")
    if builder:
        if not isinstance(builder, str) or ":" not in builder:
            raise _err(source, f"{where}.builder", f"must be 'module:callable', got {builder!r}")
        defaults, group = {}, ""

        def resolve(over):
            return dict(over)
    else:
        from mactile.rtl.registry import get_design

        try:
            design = get_design(name)
        except ValueError as e:
            raise _err(source, f"{where}.design", str(e)) from None
        defaults, group = design.params, design.group

        def resolve(over):
            return design.resolve(**over)
    family = family if family is not None else (group or name)
    if not isinstance(family, str):
        raise _err(source, f"{where}.family", f"must be a string, got {family!r}")
    d_libs = _list(source, f"{where}.libraries", entry["libraries"], str,
                   check_pdk(f"{where}.libraries")) if "libraries" in entry else libs
    d_clocks = clocks
    if "clocks_ns" in entry:
        d_clocks = [float(c) for c in _list(source, f"{where}.clocks_ns", entry["clocks_ns"],
                                            (int, float),
                                            _positive_clock(source, f"{where}.clocks_ns"))]
    ops_override = entry.get("ops_per_cycle")
    if ops_override is not None and (isinstance(ops_override, bool)
                                     or not isinstance(ops_override, (int, float))
                                     or not math.isfinite(ops_override)
                                     or not ops_override > 0):
        raise _err(source, f"{where}.ops_per_cycle", f"must be a positive finite number, got "
                   f"{ops_override!r}")
    op_name = entry.get("op")
    if op_name is not None and not isinstance(op_name, str):
        raise _err(source, f"{where}.op", f"must be a string, got {op_name!r}")

    # Each swept value checked alone (its kind, against the design's defaults): every
    # point of a random draw need not be built for a wrong value to be found.
    for k, vals in grid.items():
        for v in vals:
            try:
                resolve({**fixed, k: v})
            except (ValueError, TypeError) as e:
                raise _err(source, where, str(e)) from None
    keys = list(grid)
    return _Entry(where=where, name=name, family=family, builder=builder, fixed=fixed,
                  keys=keys, values=[grid[k] for k in keys], libs=d_libs, clocks=d_clocks,
                  measure=measure, resolve=resolve, ops_override=ops_override, op_name=op_name,
                  axes={"grid": list(keys), "libraries": d_libs, "clocks_ns": d_clocks,
                        "defaults": defaults})


@dataclass
class _Entry:
    """One ``designs:`` entry, checked, not expanded: its jobs are built by index."""

    where: str
    name: str
    family: str
    builder: str
    fixed: dict
    keys: list
    values: list
    libs: list
    clocks: list
    measure: Measure
    resolve: Any
    ops_override: Any
    op_name: Any
    axes: dict

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.values) * len(self.libs) * len(self.clocks)

    def job(self, source: str, i: int) -> Job:
        """The ``i``-th job in the order of ``itertools.product`` over the grid (last key
        fastest), then libraries, then clocks."""
        i, c = divmod(i, len(self.clocks))
        i, p = divmod(i, len(self.libs))
        point = []
        for vals in reversed(self.values):
            i, k = divmod(i, len(vals))
            point.append(vals[k])
        over = {**self.fixed, **dict(zip(self.keys, reversed(point)))}
        try:
            params = self.resolve(over)
        except (ValueError, TypeError) as e:
            raise _err(source, self.where, str(e)) from None
        ops, op = ops_per_cycle(self.name, params)
        ops = float(self.ops_override) if self.ops_override is not None else ops
        return Job(design=self.name, family=self.family, params=params, pdk=self.libs[p],
                   clock_ns=self.clocks[c], measure=self.measure, builder=self.builder,
                   ops_per_cycle=ops, op=self.op_name or op, overrides=over)


def _job_at(source: str, entries: list, i: int) -> Job:
    for e in entries:
        if i < e.size:
            return e.job(source, i)
        i -= e.size
    raise IndexError(i)


def preflight(spec: Spec, *, libraries: bool = True) -> None:
    """Refuse (:class:`SpecError`) what would make jobs fail before they start.

    Every builder is imported, every distinct parameter set of the spec's jobs is given to
    its builder (the validation ``mactile generate`` runs: a refused value such as
    ``lanes: 0`` fails here, not in every job), and with ``libraries`` every library is
    resolved (its liberty file found and read; a Dask cluster's workers resolve their own,
    so ``mactile sweep --cluster`` passes False).
    """
    from mactile.rtl.registry import get_design

    builders: dict[str, Any] = {}
    checked: set[str] = set()
    for j in spec.jobs:
        ref = j.builder or get_design(j.design).builder
        if ref not in builders:
            module, _, attr = ref.partition(":")
            try:
                builders[ref] = getattr(importlib.import_module(module), attr)
            except ImportError as e:
                hint = (" (the project's designs need Amaranth: pip install 'mactile[synth]')"
                        if not j.builder else "")
                raise _err(spec.source, j.design, f"cannot import the builder {ref!r}: "
                           f"{e}{hint}") from None
            except AttributeError:
                raise _err(spec.source, j.design, f"the builder {ref!r}: module {module!r} "
                           f"has no {attr!r}") from None
        key = json.dumps([ref, j.params], sort_keys=True, default=str)
        if key in checked:
            continue
        checked.add(key)
        try:
            builders[ref](**j.params)
        except (ValueError, TypeError) as e:
            raise _err(spec.source, f"{j.design} {_short(j.overrides)}",
                       f"the builder refuses these parameters: {e}") from None
    if libraries:
        from mactile.synth.libraries import resolve_library

        for pdk in sorted({j.pdk for j in spec.jobs}):
            try:
                resolve_library(pdk)
            except (ValueError, OSError) as e:
                raise _err(spec.source, "libraries", f"library {pdk!r} cannot be used here: "
                           f"{e}") from None
