"""One design through the flow: synthesis, equivalence, timing and power, cached.

:func:`synthesize` takes generated RTL (:mod:`.rtl`) and a library (:mod:`.libraries`)
and returns a :class:`SynthResult`:

1. Yosys (``scripts/synth.ys``): generic synthesis, flip-flop mapping (``dfflibmap``),
   ABC mapping onto the library with the clock period as delay target, area and cell
   count from ``stat -liberty``, the netlist written out.
2. :mod:`.equivalence` (Yosys, ``scripts/equiv_*.ys``): the netlist proven equivalent to
   the RTL, registers paired by name. A netlist that fails gets no area, timing or
   power: the result says ``equivalence: failed``.
3. OpenSTA (``scripts/sta.tcl``): worst setup slack at the clock; ``report_power`` with the
   activity of :mod:`.activity` (by default every net's toggle rate from a simulation of
   the netlist, :mod:`.gatesim`, applied to OpenSTA's per-pin power, :mod:`.pinpower`).

Every run lives in a folder of the cache named by a hash of everything that determines
its result (RTL text, liberty contents, clock, activity, scripts, tool versions), so an
unchanged design is never synthesized twice.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mactile.golden.fileio import publish_dir, remove_stale_temps, temp_dir

from .equivalence import check_equivalence
from .clockgate import clockgate_command, model_clock_gates
from .gatesim import simulate_netlist
from .pinpower import parse_pin_energies, power_at_rates
from .activity import ActivityOptions, PortActivity, measure_port_activity, stimulus_for
from .libraries import Library, cache_dir, clock_gate_cells, drive_constraint, flop_pins
from .rtl import Rtl
from .tools import SCRIPTS, StaTool, ToolError, ToolMissing, find_sta, render_script, run_yosys, yosys_version

__all__ = ["FlowOptions", "SynthResult", "synthesize", "check_equivalence", "FLOW_VERSION"]

#: Bumped when the flow changes in a way its scripts' text does not show.
FLOW_VERSION = 2

#: ``SynthResult.equivalence`` of a run with ``FlowOptions(prove=False)``.
NOT_CHECKED = "not checked (equivalence proof off)"

#: Default clock period (ns): 100 MHz, the clock of BlockDialect's Tables 6-7.
DEFAULT_CLOCK_NS = 10.0

#: The uniform activity (transitions per clock period) at which OpenSTA prints every pin's
#: power for the ``sim`` method; any positive value gives the same result.
PIN_ENERGY_ACTIVITY = 1.0


@dataclass(frozen=True)
class FlowOptions:
    """Options of one flow run.

    Parameters
    ----------
    clock_ns : float
        Target clock period in ns (timing constraint, ABC delay target, power frequency).
    activity : ActivityOptions
        How switching activity is obtained.
    equiv_rtl_budget_s : float
        Time for the proof against the RTL as written before the coarse-grain reference
        is used (:func:`check_equivalence`).
    equiv_rtl_max_cells : int
        The proof against the RTL as written is tried only for netlists of at most this
        many cells: measured, every design proven at that level has under 2000 cells,
        and every one above 5000 (the quantizer, 9016 cells on osu018, and larger) ran
        out of its budget there.
    timeout_s : float
        Limit on each tool run.
    prove : bool
        Prove the netlist equivalent to its RTL before it gets figures (default). False
        (a design-space sweep's ``equivalence: off``) skips the proof: the result's
        ``equivalence`` reads ``not checked`` and it has figures, but :attr:`SynthResult.ok`
        stays False, so the report of ``mactile report`` never shows an unproven number
        as proven.
    """

    clock_ns: float = DEFAULT_CLOCK_NS
    activity: ActivityOptions = field(default_factory=ActivityOptions)
    equiv_rtl_budget_s: float = 30.0
    equiv_rtl_max_cells: int = 5000
    timeout_s: float = 1800.0
    prove: bool = True

    def __post_init__(self):
        if not (isinstance(self.clock_ns, (int, float)) and math.isfinite(self.clock_ns)
                and self.clock_ns > 0):
            raise ValueError(f"clock period must be a positive number of ns, got {self.clock_ns!r}")
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {self.timeout_s!r}")


@dataclass
class SynthResult:
    """The outcome of one design on one library at one clock.

    ``area_um2``, ``cell_count``, ``slack_ns`` and ``power_mw`` are ``None`` unless the
    netlist was proven equivalent to its RTL.
    """

    design: str
    pdk: str
    clock_ns: float
    area_um2: float | None
    cell_count: int | None
    slack_ns: float | None
    meets_timing: bool | None
    power_mw: dict | None
    activity_method: str
    equivalence: str
    sequential_area_um2: float | None = None
    cells_by_type: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    group: str = ""
    reference: str = ""
    rtl_sha256: str = ""
    liberty: str = ""
    liberty_sha256: str = ""
    tools: dict = field(default_factory=dict)
    runtime_s: dict = field(default_factory=dict)
    cached: bool = False
    workdir: str = ""

    @property
    def ok(self) -> bool:
        return self.equivalence.startswith("proven")

    @property
    def failure(self) -> str:
        """Why there are no figures: ``""`` (proven), ``"not proven equivalent"`` or
        ``"timed out"`` (the proof, or synthesis for a record made on a tool timeout).
        The rtl-level proof usually times out before the coarse one decides, so a found
        difference wins over a timeout message."""
        if self.ok:
            return ""
        e = self.equivalence
        if "timed out" in e and "differs" not in e:
            return "timed out"
        return "not proven equivalent"

    def record(self) -> dict:
        """The JSON record of ``area_power.json``."""
        return asdict(self)


def _scripts_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(SCRIPTS.iterdir()):
        if p.suffix in (".ys", ".tcl"):
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _activity_method(opts: ActivityOptions, sta: StaTool) -> str:
    if opts.method == "auto":
        return "vcd" if sta.has_read_vcd else "sim"
    if opts.method == "vcd" and not sta.has_read_vcd:
        raise ToolMissing(f"--activity vcd needs an OpenSTA/OpenROAD with read_vcd; "
                        f"{sta.exe} ({sta.version}) has none")
    return opts.method


def describe_activity(method: str, port_activity: PortActivity | None, opts: ActivityOptions,
                      *, mean_rate: float | None = None) -> str:
    """The ``activity_method`` field: method and where its numbers came from."""
    if method == "global":
        return f"global (vectorless: every net {opts.global_activity:g} toggles/cycle, " \
               f"duty {opts.global_duty:g})"
    src = port_activity.source if port_activity else "?"
    if method == "sim":
        mean = f", mean {mean_rate:.3f} toggles/cycle per pin" if mean_rate is not None else ""
        return (f"sim (per-net toggle rates from a zero-delay simulation of the netlist over "
                f"{port_activity.cycles} cycles of {src} stimulus{mean}, with OpenSTA's "
                f"per-pin power)")
    if method == "vcd":
        return f"vcd (per-net, simulated {port_activity.cycles} cycles of {src} stimulus)"
    return (f"ports (input toggle rates measured over {port_activity.cycles} cycles of {src} "
            f"stimulus, propagated by OpenSTA)")


def parse_stat(path: Path, top: str) -> tuple[float, int, float, dict]:
    """Area, cell count, sequential area and cells by type from ``stat -json``."""
    data = json.loads(path.read_text())
    mods = data["modules"]
    mod = mods.get(f"\\{top}") or mods.get(top) or next(iter(mods.values()))
    return (float(mod["area"]), int(mod["num_cells"]), float(mod.get("sequential_area", 0.0)),
            dict(mod.get("num_cells_by_type", {})))


_FLOAT = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|INF|-INF|inf|-inf)"


def parse_sta(out: str) -> tuple[float | None, dict]:
    """Worst slack (ns; None when no path is constrained) and power (mW) from the STA log."""
    if "MACTILE_DONE" not in out:
        err = re.search(r"MACTILE_ERROR (.*)", out)
        raise ToolError(f"timing/power run did not finish: {err.group(1) if err else 'no result'}")
    m = re.search(r"worst slack(?: max)?\s+" + _FLOAT, out)
    if not m:
        raise ToolError("timing/power run printed no worst slack")
    slack = float(m.group(1).replace("INF", "inf"))
    if not math.isfinite(slack) or abs(slack) > 1e20:
        slack = None
    power_part = out.split("MACTILE_SECTION power", 1)[1]
    m = re.search(r"^Total\s+" + r"\s+".join([_FLOAT] * 4), power_part, re.M)
    if not m:
        raise ToolError("timing/power run printed no power total")
    watts = [float(x) for x in m.groups()]
    power = {k: w * 1e3 for k, w in zip(("internal", "switching", "leakage", "total"), watts)}
    return slack, power


def _rel(path: Path, start: Path) -> str:
    # Yosys in WebAssembly has a private /tmp: give it paths relative to its working folder.
    return os.path.relpath(path, start)


def _code_hash(*names: str) -> str:
    """Hash of this package's modules ``names`` (their behaviour shapes a result)."""
    h = hashlib.sha256()
    for n in names:
        h.update(Path(__file__).with_name(n).read_bytes())
    return h.hexdigest()


def _run_key(rtl: Rtl, lib: Library, opts: FlowOptions, sta: StaTool, method: str,
             activity_text: str) -> str:
    key = {
        "flow": FLOW_VERSION, "scripts": _scripts_hash(), "rtl": rtl.sha256, "top": rtl.top,
        "code": _code_hash("activity.py", "gatesim.py", "pinpower.py"),
        "liberty": lib.sha256, "dont_use": list(lib.dont_use), "clock_ns": float(opts.clock_ns),
        "activity": opts.activity.key(), "method": method,
        "activity_text": hashlib.sha256(activity_text.encode()).hexdigest(),
        "equiv_budget": opts.equiv_rtl_budget_s, "equiv_max_cells": opts.equiv_rtl_max_cells,
        "timeout_s": opts.timeout_s, "yosys": yosys_version(), "sta": [sta.kind, sta.version],
    }
    if not opts.prove:  # only then, so that every existing cache entry keeps its key
        key["prove"] = False
    if _gated(rtl):  # likewise: the same RTL with and without the ICGs
        key["clockgate"] = clockgate_command(lib)
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def _gated(rtl: Rtl) -> bool:
    """Whether the design was built with its ``clock_gating`` option on."""
    return rtl.params.get("clock_gating") is True


#: The line of ``scripts/synth.ys`` that the clock-gating option fills.
_CLOCKGATE_LINE = ("# Clock gating (designs built with clock_gating=true; empty otherwise): "
                   "mactile.synth.clockgate.\n{{clockgate}}\n")


def _synth_key(rtl: Rtl, lib: Library, opts: FlowOptions) -> str:
    """Everything the netlist depends on (not the equivalence check: see _equiv_key)."""
    drive = drive_constraint(lib)
    # The clock-gating line renders empty without the option: the script is hashed
    # without it, so netlists made before the option existed keep their keys.
    key = {
        "flow": FLOW_VERSION,
        "scripts": [render_script_text("synth.ys").replace(_CLOCKGATE_LINE, "")],
        "constr": drive.text() if drive else None,
        "rtl": rtl.sha256, "top": rtl.top, "liberty": lib.sha256, "dont_use": list(lib.dont_use),
        "clock_ns": float(opts.clock_ns), "timeout_s": opts.timeout_s,
        "yosys": yosys_version(),
    }
    if _gated(rtl):
        key["clockgate"] = clockgate_command(lib)
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def _equiv_key(opts: FlowOptions, gated: bool = False) -> str:
    """Everything the equivalence verdict on a given netlist depends on besides the
    netlist: the scripts, the pairing code, the budgets and Yosys. A change here re-runs
    the check on the cached netlist, not synthesis."""
    key = {
        "flow": FLOW_VERSION,
        "scripts": [render_script_text(n)
                    for n in ("equiv_gold.ys", "equiv_gate.ys", "equiv_prove.ys")],
        "code": hashlib.sha256(Path(__file__).with_name("equivalence.py").read_bytes()
                               ).hexdigest(),
        "equiv_budget": opts.equiv_rtl_budget_s, "equiv_max_cells": opts.equiv_rtl_max_cells,
        "timeout_s": opts.timeout_s, "yosys": yosys_version(),
    }
    if gated:  # the proof then reads the netlist through the clock-gate model
        key["clockgate_model"] = hashlib.sha256(
            Path(__file__).with_name("clockgate.py").read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def _store_netlist(work: Path, shared: Path) -> None:
    """Keep the synthesis/equivalence files of a run for runs that differ in activity only
    (replacing an older verdict on the same netlist)."""
    remove_stale_temps(shared.parent)
    tmp = temp_dir(shared.parent, shared.name)
    try:
        for f in work.iterdir():
            if f.is_file() and (f.name in ("rtl.v", "netlist.v", "stat.json",
                                           "equivalence.json", "abc.constr")
                                or f.name.startswith(("synth.", "equiv"))):
                shutil.copy2(f, tmp / f.name)
        publish_dir(tmp, shared, replace=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def render_script_text(name: str) -> str:
    return (SCRIPTS / name).read_text()


def synthesize(rtl: Rtl, lib: Library, opts: FlowOptions | None = None, *, component=None,
               group: str = "", reference: str = "", use_cache: bool = True,
               sta: StaTool | None = None, netlist_filter=None) -> SynthResult:
    """Run the whole flow for one design; reuse the cached result when nothing changed.

    Parameters
    ----------
    rtl : Rtl
        From :func:`~mactile.synth.rtl.design_rtl` or :func:`~.rtl.component_rtl`.
    lib : Library
    opts : FlowOptions
    component : amaranth component, optional
        Needed only for the ``vcd`` activity method (the simulation).
    group, reference : str
        Copied into the result (the registry's table grouping).
    use_cache : bool
        False: run even when a cached result exists (and replace it).
    sta : StaTool, optional
        The timing tool (default :func:`~.tools.find_sta`).
    netlist_filter : callable str -> str, optional
        Fault injection: rewrites the netlist text before the checks (the tests use it to
        show that a wrong netlist gets no numbers). Never cached.

    Raises
    ------
    ToolError
        A tool is missing or failed (not for an inequivalent netlist: that is a result).
    """
    opts = opts or FlowOptions()
    sta = sta or find_sta()
    method = _activity_method(opts.activity, sta)
    stimulus, port_act = None, None
    if method in ("ports", "vcd", "sim"):
        stimulus, source = stimulus_for(rtl, opts.activity.cycles, opts.activity.seed,
                                        opts.activity.workload, opts.activity.reuse)
        port_act = measure_port_activity(rtl, stimulus, source=source)
    activity_text = port_act.tcl() if port_act else ""
    if stimulus is not None:  # the simulations see every value, not only the port rates
        activity_text += json.dumps(stimulus, sort_keys=True)
    if method == "vcd" and component is None:
        raise ToolError("the vcd activity method needs the Amaranth component to simulate")

    key = _run_key(rtl, lib, opts, sta, method, activity_text)
    runs = cache_dir() / "runs"
    final = runs / f"{rtl.top}-{lib.name}-{key[:16]}"
    if netlist_filter is not None:
        use_cache = False
        final = final.with_name(final.name + "-filtered")
    if use_cache and (final / "result.json").exists():
        try:
            res = SynthResult(**json.loads((final / "result.json").read_text()))
            res.cached = True
            # Labels, not in the key: the same RTL may be cached under another caller's
            # (another registry name for the same parameters, e.g. nvfp4-tc-os at 4 x 4
            # and nvfp4-tc-os-4x4).
            res.design, res.group, res.reference = rtl.design, group, reference
            return res
        except (TypeError, ValueError):
            pass  # an old or damaged record: run again
    # The run is built in a private folder (named with this process's id, so one left by
    # a killed process is removed by the next run) and published in one rename: two
    # processes on one cache never see a half-written entry, and the second to finish
    # keeps the first one's (identical) entry. --no-cache replaces only the entry that
    # existed when this run started, not one a concurrent run has just published.
    remove_stale_temps(runs)
    stale = _entry_id(final) if not use_cache else None
    work = temp_dir(runs, final.name)
    try:
        res = _run(rtl, lib, opts, sta, method, port_act, stimulus, component, work,
                   group=group, reference=reference, netlist_filter=netlist_filter)
        res.workdir = str(final)
        res.equivalence = res.equivalence.replace(str(work), str(final))
        (work / "result.json").write_text(json.dumps(res.record(), indent=1))
        replace = stale is not None and _entry_id(final) == stale
        publish_dir(work, final, replace=replace or netlist_filter is not None)
    except ToolError as e:
        # Keep the logs the error message points at, in a folder named after the run.
        failed = final.with_name(final.name + ".failed")
        publish_dir(work, failed, replace=True)
        raise type(e)(f"{rtl.design} on {lib.name}: " + str(e).replace(str(work), str(failed))
                      ) from None
    except BaseException:  # Ctrl-C, SIGTERM (the CLI raises it as KeyboardInterrupt)
        shutil.rmtree(work, ignore_errors=True)
        raise
    return res


def _entry_id(path: Path):
    """Identity of a cache entry (None if absent), to tell it from a newer one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _run(rtl: Rtl, lib: Library, opts: FlowOptions, sta: StaTool, method: str,
         port_act: PortActivity | None, stimulus, component, work: Path, *,
         group: str, reference: str, netlist_filter=None) -> SynthResult:
    times = {}
    (work / "rtl.v").write_text(rtl.verilog)
    liberty = _rel(lib.path, work)
    dont_use = lib.dont_use_args()

    # Synthesis and equivalence do not depend on the activity: a netlist already made for
    # this RTL, library and clock is reused (another activity method, a new OpenSTA), and
    # so is its equivalence verdict while the check itself is unchanged.
    gated = _gated(rtl)
    skey, ekey = _synth_key(rtl, lib, opts), _equiv_key(opts, gated)
    shared = cache_dir() / "netlists" / f"{rtl.top}-{lib.name}-{skey[:16]}"
    reuse = netlist_filter is None and (shared / "netlist.v").exists()
    equivalence = None
    if reuse:
        for f in shared.iterdir():
            if f.is_file():
                shutil.copy2(f, work / f.name)
        try:
            saved = json.loads((work / "equivalence.json").read_text())
        except (OSError, ValueError):
            saved = {}
        if saved.get("key") == ekey:
            equivalence = saved["equivalence"]  # runtime_s then counts this run's work only
    else:
        t0 = time.perf_counter()
        drive = drive_constraint(lib)
        if drive is not None:
            (work / "abc.constr").write_text(drive.text())
        run_yosys(render_script("synth.ys", rtl="rtl.v", top=rtl.top, liberty=liberty,
                                clockgate=clockgate_command(lib) if gated else "",
                                dont_use=dont_use, clock_ps=f"{opts.clock_ns * 1000:.0f}",
                                constr="-constr abc.constr" if drive else "",
                                stat_json="stat.json", netlist="netlist.v"),
                  work, "synth.log", timeout=opts.timeout_s)
        times["synth"] = time.perf_counter() - t0
    area, ncells, seq_area, by_type = parse_stat(work / "stat.json", rtl.top)

    base = dict(design=rtl.design, pdk=lib.name, clock_ns=float(opts.clock_ns),
                params=rtl.params, group=group, reference=reference, rtl_sha256=rtl.sha256,
                liberty=str(lib.source), liberty_sha256=lib.sha256,
                tools={"yosys": yosys_version(), "sta": f"{sta.kind} {sta.version}"})

    if netlist_filter is not None:
        net = work / "netlist.v"
        net.write_text(netlist_filter(net.read_text()))

    if equivalence is None and not opts.prove:
        equivalence = NOT_CHECKED
        if netlist_filter is None and not reuse:
            _store_netlist(work, shared)  # a later run with the proof reuses the netlist
    if equivalence is None:
        for f in work.glob("equiv*"):
            f.unlink()  # an earlier check's logs
        t0 = time.perf_counter()
        rtl_budget = (opts.equiv_rtl_budget_s if ncells <= opts.equiv_rtl_max_cells
                      else 0.0)
        proved, n_icg = "netlist.v", 0
        if gated:  # the ICGs as the enables they implement (mactile.synth.clockgate)
            text, n_icg = model_clock_gates((work / "netlist.v").read_text(),
                                            clock_gate_cells(lib), flop_pins(lib))
            (work / "equiv_netlist_cg.v").write_text(text)
            proved = "equiv_netlist_cg.v"
        equivalence = check_equivalence(work, "rtl.v", proved, rtl.top, liberty,
                                        rtl_budget_s=rtl_budget, timeout_s=opts.timeout_s)
        if n_icg:
            equivalence += (f" [{n_icg} clock-gate cell(s) modelled as the enables they "
                            "implement]")
        times["equiv"] = time.perf_counter() - t0
        if netlist_filter is None:
            (work / "equivalence.json").write_text(json.dumps(
                {"equivalence": equivalence.replace(str(work), "<run folder>"), "times": times,
                 "key": ekey}))
            _store_netlist(work, shared)
    if not (equivalence.startswith("proven") or equivalence == NOT_CHECKED):
        times["total"] = sum(times.values())
        return SynthResult(**base, area_um2=None, cell_count=None, slack_ns=None,
                           meets_timing=None, power_mw=None,
                           activity_method=describe_activity(method, port_act, opts.activity),
                           equivalence=equivalence, runtime_s=times)

    toggles = None
    if method == "sim":
        t0 = time.perf_counter()
        toggles = simulate_netlist(work, "netlist.v", liberty, rtl.top, stimulus,
                                   clock=rtl.clock, reset=rtl.reset, timeout=opts.timeout_s,
                                   clock_gates=clock_gate_cells(lib) if gated else None)
        times["gatesim"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    sim = method == "sim"
    settings = {
        "liberty": str(lib.path), "netlist": "netlist.v", "top": rtl.top, "lef": lib.lef,
        "clock_port": rtl.clock or "", "clock_ns": repr(float(opts.clock_ns)),
        "activity": "pin_energies" if sim else method, "activity_tcl": "activity.tcl",
        # Amaranth's simulator writes the design under the scopes bench > top.
        "vcd": "sim.vcd", "vcd_scope": "bench/top",
        "global_activity": repr(PIN_ENERGY_ACTIVITY if sim else opts.activity.global_activity),
        "global_duty": repr(0.5 if sim else opts.activity.global_duty),
    }
    if port_act is not None:
        (work / "activity.tcl").write_text(port_act.tcl())
    if method == "vcd":
        from .activity import write_vcd
        write_vcd(rtl, component, stimulus, work / "sim.vcd", clock_ns=opts.clock_ns)
    run_tcl = "".join(f"set mactile({k}) {{{v}}}\n" for k, v in settings.items())
    run_tcl += f"source {{{SCRIPTS / 'sta.tcl'}}}\n"
    (work / "sta_run.tcl").write_text(run_tcl)
    out = sta.run(work / "sta_run.tcl", work / "sta.log", timeout=opts.timeout_s)
    slack, power = parse_sta(out)
    if sim:
        energies = parse_pin_energies(out, activity=PIN_ENERGY_ACTIVITY,
                                      clock_pins=toggles.clock_pins)
        power = power_at_rates(energies, toggles.pins, clock_rate_pins=toggles.gated_pins)
        # The per-pin lines (tens of MB on the large designs) are not kept.
        (work / "sta.log").write_text(
            "".join(ln + "\n" for ln in out.splitlines() if not ln.startswith("power:"))
            + f"# {len(energies.pins)} per-pin power lines (set_debug power 2) removed; the "
              f"report above is at a uniform activity of {PIN_ENERGY_ACTIVITY}, the "
              f"record's power is at the simulated rates\n")
    times["sta"] = time.perf_counter() - t0
    times["total"] = sum(times.values())
    return SynthResult(**base, area_um2=area, cell_count=ncells, slack_ns=slack,
                       meets_timing=slack is None or slack >= 0, power_mw=power,
                       activity_method=describe_activity(
                           method, port_act, opts.activity,
                           mean_rate=toggles.mean_rate() if toggles else None),
                       equivalence=equivalence, sequential_area_um2=seq_area,
                       cells_by_type=by_type, runtime_s=times)
