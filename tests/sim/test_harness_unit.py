"""The harness parts that need no simulator: bit packing, the scoreboard, stream layout,
the burst wrapper's checks and simulator discovery."""
import numpy as np
import pytest

from mactile.sim import Scoreboard, Stream, Vectors, pack_streams, simulator_status
from mactile.sim.bench import Mismatch
from mactile.sim.hdl import CYCLE_BITS, Layout, Port


PORTS = (Port("a", "in", 4, False), Port("b", "in", 3, True), Port("v", "in", 1, False),
         Port("x", "out", 5, True), Port("y", "out", 9, False))


@pytest.mark.parametrize("lanes,depth,cycles", [(1, 1, 5), (3, 4, 10), (2, 8, 16)])
def test_pack_then_unpack_round_trips_through_the_wrapper_layout(lanes, depth, cycles, rng):
    lay = Layout(PORTS, lanes, depth)
    assert lay.lane_in == 8 and lay.lane_out == 14
    vals = {"a": rng.integers(0, 16, (cycles, lanes)), "b": rng.integers(-4, 4, (cycles, lanes)),
            "v": rng.integers(0, 2, (cycles, lanes))}
    stim = lay.pack_inputs(vals, cycles)
    assert stim.shape == (lay.bursts(cycles), (lay.stim_bits + 7) // 8)
    # Emulate the wrapper: outputs x = b and y = a * 32 + v of the same slot.
    bits = np.unpackbits(stim, axis=1, bitorder="little", count=lay.stim_bits)
    slots = bits.reshape(-1, lanes, lay.lane_in).astype(np.int64)
    a = slots[:, :, 0:4] @ (1 << np.arange(4))
    b = slots[:, :, 4:7] @ (1 << np.arange(3))
    v = slots[:, :, 7]
    x = b & 31
    x = np.where(b >= 4, (b - 8) & 31, x)
    y = a * 32 + v
    outb = np.concatenate([(x[..., None] >> np.arange(5)) & 1, (y[..., None] >> np.arange(9)) & 1], -1)
    resp_bits = outb.reshape(lay.bursts(cycles), -1)
    counter = (np.arange(lay.bursts(cycles))[:, None] + 7 >> np.arange(CYCLE_BITS)) & 1
    resp = np.packbits(np.concatenate([counter, resp_bits], 1).astype(np.uint8), axis=1,
                       bitorder="little")
    cnt, out = lay.unpack_outputs(resp)
    assert np.array_equal(cnt, np.arange(lay.bursts(cycles)) + 7)
    assert np.array_equal(out["x"][:cycles], vals["b"])
    assert np.array_equal(out["y"][:cycles], vals["a"] * 32 + vals["v"])


def test_pack_rejects_bad_stimulus():
    lay = Layout(PORTS, 2, 4)
    with pytest.raises(ValueError, match="unknown input port"):
        lay.pack_inputs({"q": np.zeros((3, 2))}, 3)
    with pytest.raises(ValueError, match=r"shape \(3, 1\), expected \(3, 2\)"):
        lay.pack_inputs({"a": np.zeros((3, 1))}, 3)
    with pytest.raises(ValueError, match="'a' does not fit 4 bits"):
        lay.pack_inputs({"a": np.full((3, 2), 16)}, 3)
    with pytest.raises(ValueError, match="'b' does not fit 3 bits"):
        lay.pack_inputs({"b": np.full((3, 2), -5)}, 3)


def test_scoreboard_shifts_by_latency_and_reports_in_order():
    exp = np.arange(12).reshape(6, 2)
    vec = Vectors({"a": np.zeros((6, 2), int)}, {"x": exp})
    got = np.vstack([np.full((2, 2), -1), exp, np.zeros((1, 2), int)])  # latency 2, + drain
    got[2 + 4, 1] = 99
    got[2 + 1, 0] = 98
    n, mism, aligned = Scoreboard(2).compare(vec, {"x": got})
    assert n == 2
    assert [(m.cycle, m.lane, m.expected, m.got) for m in mism] == [(1, 0, 2, 98), (4, 1, 9, 99)]
    assert np.array_equal(aligned["x"][0], exp[0])
    with pytest.raises(ValueError, match="need 8"):
        Scoreboard(2).compare(vec, {"x": got[:7]})
    with pytest.raises(ValueError, match="latency must be a non-negative integer"):
        Scoreboard(-1)


def test_scoreboard_ignores_masked_entries():
    exp = np.zeros((3, 1), int)
    mask = np.array([[True], [False], [True]])
    vec = Vectors({"a": exp}, {"x": exp}, mask=mask)
    assert vec.count == 2
    n, _, _ = Scoreboard(0).compare(vec, {"x": np.array([[0], [5], [0]])})
    assert n == 0


def test_pack_streams_lays_streams_back_to_back_on_the_least_loaded_lane():
    s = [Stream(f"s{k}", {"a": np.full(n, k)}) for k, n in enumerate([5, 3, 3, 1])]
    inputs, mask, labels, names, where = pack_streams(s, 2)
    assert inputs["a"].shape == (6, 2) and mask.sum() == 12
    assert where[0] == (0, 0) and where[1] == (1, 0) and where[2] == (1, 3)
    assert names[labels[4, 1]] == "s2" and mask.all()
    lane, start = where[3]
    assert inputs["a"][start, lane] == 3
    with pytest.raises(ValueError, match="no streams"):
        pack_streams([], 2)


def test_vectors_validate_shapes():
    with pytest.raises(ValueError, match="share one"):
        Vectors({"a": np.zeros((3, 2))}, {"x": np.zeros((3, 1))})
    with pytest.raises(ValueError, match="2-D"):
        Vectors({"a": np.zeros(3)}, {"x": np.zeros(3)})


def test_burst_wrapper_and_simulator_argument_checks():
    pytest.importorskip("amaranth")
    from mactile.rtl.registry import DESIGNS
    from mactile.sim.hdl import burst_wrapper, generate

    gen = generate(DESIGNS["mac-int4"].build())
    text = burst_wrapper(gen, lanes=2, depth=4)
    assert text.count("mac_int4_t64_l1 dut") == 1 and "for (i = 0; i < 2;" in text
    assert "always #5 clk" in burst_wrapper(gen, depth=4, clock_period_ns=10)
    with pytest.raises(ValueError, match="depth must be a positive integer"):
        burst_wrapper(gen, depth=0)
    with pytest.raises(ValueError, match="even integer"):
        burst_wrapper(gen, clock_period_ns=5)
    with pytest.raises(ValueError, match="unknown simulator 'vcs'"):
        simulator_status("vcs")


def test_mismatch_is_plain_data():
    m = Mismatch(1, 2, "acc", 3, 4, "text")
    assert (m.cycle, m.lane, m.port, m.expected, m.got, m.text) == (1, 2, "acc", 3, 4, "text")
