"""cocotb test module run inside the simulator by :func:`mactile.sim.run`.

It knows nothing about designs: it replays the packed ``stim`` words of a plan through the
burst wrapper (:func:`mactile.sim.hdl.burst_wrapper`) and records every ``resp`` word.
Per burst of ``depth`` clock cycles it does one read, one write and one timer await on
handles looked up once; packing, golden modelling and checking happen outside, in NumPy.

Protocol: with ``rst`` high, wait for the first cycle of a burst (``phase == 0``), drop
``rst``, step 1 ns into the cycle (away from every clock edge), then every ``depth``
periods: read ``resp`` (the outputs of the burst that just ended) and write the next
``stim`` word (loaded at the end of the burst now running). The word written at step
``k`` is applied during burst ``k + 1`` and its outputs are read at step ``k + 2``.
"""
from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, Timer

PLAN_ENV = "MACTILE_SIM_PLAN"
PERIOD_NS = 10
#: Reads before the first one that holds outputs of the first word.
SKIP_READS = 2


def _reader(handle):
    """A raw reader of a wide signal's bits (MSB first) where the GPI handle offers one
    (cocotb 2.x), else the public ``.value`` API."""
    raw = getattr(getattr(handle, "_handle", None), "get_signal_val_binstr", None)
    if raw is not None:
        return raw
    return lambda: str(handle.value)


@cocotb.test()
async def replay(dut):
    with open(os.environ[PLAN_ENV]) as f:
        plan = json.load(f)
    rows = np.load(plan["stimulus"])["stim"]
    depth = int(plan["depth"])
    words = [int.from_bytes(r.tobytes(), "little") for r in rows] + [0] * int(plan["drain"])

    clk, rst, stim, resp, phase = dut.clk, dut.rst, dut.stim, dut.resp, dut.phase
    if not plan["internal_clock"]:
        Clock(clk, PERIOD_NS, unit="ns").start()
    read = _reader(resp)
    rst.value = 1
    stim.value = 0
    fall = FallingEdge(clk)
    for _ in range(2):  # at least one rising edge in reset
        await fall
    while int(phase.value) != 0:
        await fall
    rst.value = 0
    await Timer(1, unit="ns")

    got = []
    append = got.append
    step = Timer(depth * PERIOD_NS, unit="ns")
    t0 = time.perf_counter()
    for w in words:
        append(read())
        stim.value = w
        await step
    append(read())
    elapsed = time.perf_counter() - t0

    got = got[SKIP_READS:]
    bad = [i for i, s in enumerate(got) if not set(s) <= {"0", "1"}]
    if bad:
        raise AssertionError(f"resp holds X/Z in burst {bad[0]}")
    nbytes = (int(plan["resp_bits"]) + 7) // 8
    out = np.frombuffer(b"".join(int(s, 2).to_bytes(nbytes, "little") for s in got),
                        dtype=np.uint8).reshape(len(got), nbytes)
    np.save(plan["response"], out)
    with open(plan["timing"], "w") as f:
        json.dump({"loop_s": elapsed, "bursts": len(words)}, f)
