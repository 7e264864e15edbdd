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
import itertools
import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SpecError", "Measure", "Job", "Spec", "load_spec", "parse_spec", "ops_per_cycle",
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
    import yaml

    p = Path(path)
    if not p.exists():
        raise SpecError(f"sweep spec {str(p)!r} does not exist")
    if not p.is_file():
        raise SpecError(f"sweep spec {str(p)!r} is not a file")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise SpecError(f"sweep spec {str(p)!r} is not a text (YAML) file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"cannot parse {str(p)!r} as YAML: {e}") from None
    if search is not None and isinstance(data, dict):
        data = {**data, "search": search}
    return parse_spec(data, source=str(p), text=text)


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
    for k, lo in (("cycles", 2), ("seed", 0)):
        if k in m and (isinstance(m[k], bool) or not isinstance(m[k], int) or m[k] < lo):
            raise _err(source, f"measure.{k}", f"must be an integer >= {lo}, got {m[k]!r}")
    if "equivalence" in m and not isinstance(m["equivalence"], bool):
        raise _err(source, "measure.equivalence", f"must be true or false, got "
                   f"{m['equivalence']!r}")
    for k, lo, hi in (("timeout_s", 0.0, math.inf), ("global_activity", 0.0, 2.0)):
        if k in m:
            v = m[k]
            if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                    or not (lo < v <= hi if k == "timeout_s" else lo <= v <= hi)):
                raise _err(source, f"measure.{k}", f"must be a number in "
                           f"{'(0, inf)' if k == 'timeout_s' else '[0, 2]'}, got {v!r}")
            m[k] = float(v)
    return Measure(**m)


def _positive_clock(source, where):
    def check(v):
        if not (math.isfinite(v) and v > 0):
            raise _err(source, where, f"clock periods must be positive ns, got {v!r}")
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
    workers = data.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise _err(source, "workers", f"must be an integer >= 1, got {workers!r}")
    designs = data.get("designs")
    if not isinstance(designs, list) or not designs:
        raise _err(source, "designs", "must be a non-empty list of designs to sweep")

    points: list[list[Job]] = []
    axes: dict[str, dict] = {}
    for i, entry in enumerate(designs):
        jobs, ax = _design_jobs(source, f"designs[{i}]", entry, libs, clocks, measure,
                                check_pdk)
        points.append(jobs)
        axes[f"designs[{i}]"] = ax
    every = [j for js in points for j in js]
    ids = {}
    for j in every:
        if j.job_id in ids:
            raise _err(source, "designs", f"the same configuration twice ({j.label()})")
        ids[j.job_id] = j
    chosen = every
    if search["method"] == "random":
        rng = random.Random(search["seed"])
        k = min(search["budget"], len(every))
        picked = sorted(rng.sample(range(len(every)), k))
        chosen = [every[i] for i in picked]
    return Spec(name=name, jobs=tuple(chosen), search=search, cluster=cluster, workers=workers,
                description=str(data.get("description", "")), text=text, source=source,
                total_points=len(every), axes=axes)


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
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise _err(source, "search.seed", f"must be an integer, got {seed!r}")
    return {"method": "random", "budget": budget, "seed": seed}


def _design_jobs(source, where, entry, libs, clocks, measure, check_pdk):
    if not isinstance(entry, dict):
        raise _err(source, where, f"must be a mapping with a `design:` name, got {entry!r}")
    unknown = set(entry) - _DESIGN_KEYS
    if unknown:
        raise _err(source, where, f"unknown key(s) {sorted(unknown)}; known: "
                   f"{sorted(_DESIGN_KEYS)}")
    builder = entry.get("builder", "")
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
                                     or not ops_override > 0):
        raise _err(source, f"{where}.ops_per_cycle", f"must be a positive number, got "
                   f"{ops_override!r}")
    op_name = entry.get("op")
    if op_name is not None and not isinstance(op_name, str):
        raise _err(source, f"{where}.op", f"must be a string, got {op_name!r}")

    jobs = []
    keys = list(grid)
    for values in itertools.product(*(grid[k] for k in keys)):
        over = {**fixed, **dict(zip(keys, values))}
        try:
            params = resolve(over)
        except (ValueError, TypeError) as e:
            raise _err(source, where, str(e)) from None
        ops, op = ops_per_cycle(name, params)
        ops = float(ops_override) if ops_override is not None else ops
        op = op_name or op
        for pdk in d_libs:
            for clk in d_clocks:
                jobs.append(Job(design=name, family=family, params=params, pdk=pdk,
                                clock_ns=clk, measure=measure, builder=builder,
                                ops_per_cycle=ops, op=op, overrides=over))
    return jobs, {"grid": list(keys), "libraries": d_libs, "clocks_ns": d_clocks,
                  "defaults": defaults}
