"""Every Table 5 MAC against the golden datapath model in Verilator and Icarus: every
operand pair (with signs; every dialect pair for DialectFP4), random 64-term dot products
with the accumulator corner cases, exact equality. Deliberately broken designs are caught
and reported readably. Waveforms and activity dumps land in the test's own folder."""
import json

import numpy as np
import pytest

from mactile.sim.testing import SIM_PARAMS, first_available, quickest_build, run_or_skip

pytest.importorskip("amaranth")

from amaranth.hdl import Array, Cat, Const, Mux, Signal, signed  # noqa: E402

from mactile.golden import FORMATBOOK  # noqa: E402
from mactile.rtl.mac.unit import MacUnit  # noqa: E402
from mactile.rtl.registry import DESIGNS  # noqa: E402

pytestmark = pytest.mark.sim

MACS = ["mac-int4", "mac-int5", "mac-int8", "mac-fp4", "mac-fp6-e2m3", "mac-fp6-e3m2",
        "mac-dialectfp4", "mac-dialectfp4-int4", "mac-dialectfp4-decode",
        "mac-dialectfp4-int4-decode"]
#: Operand pairs (times dialect pairs) the exhaustive suite must cover: the paper's
#: DialectFP4 MACs take every pair of 5-bit sign + q operands.
PAIRS = {"mac-int4": 256, "mac-int5": 1024, "mac-int8": 65536, "mac-fp4": 256,
         "mac-fp6-e2m3": 4096, "mac-fp6-e3m2": 4096, "mac-dialectfp4": 1024,
         "mac-dialectfp4-int4": 1024, "mac-dialectfp4-decode": 65536 + 1024,
         "mac-dialectfp4-int4-decode": 65536 + 1024}


#: Random vectors per design: Icarus, the second simulator, runs about 20x slower.
RANDOM_VECTORS = {"verilator": 65536, "icarus": 16384}


@pytest.mark.parametrize("sim", SIM_PARAMS)
@pytest.mark.parametrize("name", MACS)
def test_every_operand_pair(name, sim, tmp_path):
    r = run_or_skip(name, suite="exhaustive", sim=sim, test_dir=tmp_path)
    assert r.ok, r.summary()
    assert r.vectors >= PAIRS[name]
    assert r.notes["corner cases"]  # the corner streams ran too


@pytest.mark.parametrize("sim", SIM_PARAMS)
@pytest.mark.parametrize("name", MACS)
def test_random_dot_products_with_corner_cases(name, sim, tmp_path):
    n = RANDOM_VECTORS[sim]
    r = run_or_skip(name, suite="random", vectors=n, seed=7, sim=sim, test_dir=tmp_path)
    assert r.ok, r.summary()
    assert r.vectors >= n
    corners = r.notes["corner cases"]
    assert {"max positive sum", "max negative sum", "back-to-back blocks (max, min, max, min)",
            "clear mid-stream (with a product)"} <= set(corners)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["mismatched"] == 0 and saved["vectors"] == r.vectors


@pytest.mark.parametrize("name", ["mac-int8", "mac-dialectfp4-int4", "mac-dialectfp4-int4-decode"])
def test_pipelined_variant_latency_read_from_the_component(name, tmp_path):
    r = run_or_skip(name, params={"product_register": True}, vectors=20000,
                    sim=quickest_build(), test_dir=tmp_path)
    assert r.latency == 2 and r.ok, r.summary()


# ------------------------------------------------------------------ broken designs
class WrongTableMac(MacUnit):
    """Dialect 15's index 5 read as 3.0 (q = 6), as in the other dialects."""

    def _dialect_q(self, m, code, dialect, side):
        book = FORMATBOOK.copy()
        book[15, 5] = 6
        table = Array(Const(int(q), 4) for q in book.reshape(-1))
        q = Signal(4, name=f"{side}_q")
        m.d.comb += q.eq(table[Cat(code[:3], dialect)])
        return code[3], q


class ClearNeedsValidMac(MacUnit):
    """``clear`` only takes effect together with ``valid``."""

    def _accumulate(self, m, product, valid, clear):
        addend = Signal(signed(self.datapath.acc_bits))
        m.d.comb += addend.eq(Mux(valid, product, 0))
        m.d.sync += self.acc.eq(Mux(clear & valid, 0, self.acc) + addend)


class NarrowAccMac(MacUnit):
    """An accumulator one bit too narrow (sign-extended back to the port)."""

    def _accumulate(self, m, product, valid, clear):
        n = self.datapath.acc_bits - 1
        s = Signal(signed(n))
        m.d.sync += s.eq(Mux(clear, 0, s) + Mux(valid, product, 0))
        m.d.comb += self.acc.eq(s)


def test_a_wrong_dialect_table_entry_is_caught_and_decoded(tmp_path):
    bad = WrongTableMac(**DESIGNS["mac-dialectfp4-decode"].params)
    r = run_or_skip("mac-dialectfp4-decode", suite="exhaustive", component=bad,
                    sim=quickest_build(), test_dir=tmp_path)
    assert not r.ok
    # Only operands of dialect 15 with index 5 are wrong: about 1,000 of 66,560 pairs.
    assert 0 < r.mismatched < 2048
    first = r.mismatches[0].text
    assert "d15 idx 5" in first and "acc expected" in first, first
    assert "first failing vector: " + first in r.summary()


class WrongSignMac(MacUnit):
    """The paper's MAC with the sign XOR replaced by OR: (-q) x (-q) comes out negative."""

    def _multiply(self, m, product):
        sa, qa = self._dialect_q(m, self.a, None, "a")
        sw, qw = self._dialect_q(m, self.w, None, "w")
        mag = Signal(8)
        m.d.comb += [mag.eq(qa * qw), product.eq(Mux(sa | sw, -mag, mag))]


def test_a_wrong_sign_in_the_dequantized_mac_is_caught_and_decoded(tmp_path):
    bad = WrongSignMac(**DESIGNS["mac-dialectfp4"].params)
    r = run_or_skip("mac-dialectfp4", suite="exhaustive", component=bad,
                    sim=quickest_build(), test_dir=tmp_path)
    assert not r.ok
    # Both signs negative with nonzero magnitudes: 15 x 15 of the 1,024 pairs (and corners).
    first = r.mismatches[0].text
    assert "a=0x1" in first and "(-" in first and "acc expected" in first, first


def test_clear_without_a_product_is_caught_by_its_corner_case(tmp_path):
    bad = ClearNeedsValidMac(**DESIGNS["mac-int4"].params)
    r = run_or_skip("mac-int4", suite="random", vectors=2000, component=bad,
                    sim=quickest_build(), test_dir=tmp_path)
    assert not r.ok
    assert "[clear mid-stream (without a product), then idle]" in r.mismatches[0].text


def test_a_narrow_accumulator_is_caught_by_the_max_sum_corner(tmp_path):
    bad = NarrowAccMac(**DESIGNS["mac-int4"].params)
    r = run_or_skip("mac-int4", suite="exhaustive", component=bad,
                    sim=quickest_build(), test_dir=tmp_path)
    assert not r.ok
    texts = " | ".join(m.text for m in r.mismatches)
    assert "max positive sum" in texts or "back-to-back" in texts, texts
    # A single product never overflows it: the operand-pair part of the suite passes.
    assert all("exhaustive operand pairs" not in m.text for m in r.mismatches)


# ------------------------------------------------------------------ waves and activity
@pytest.mark.parametrize("sim", SIM_PARAMS)
def test_waves_are_opt_in_and_land_in_the_test_folder(sim, tmp_path):
    r = run_or_skip("mac-fp4", suite="exhaustive", sim=sim, test_dir=tmp_path, waves="vcd")
    assert r.ok and r.waves == tmp_path / "mac-fp4.vcd"
    text = r.waves.read_text()
    assert "$enddefinitions" in text and " acc " in text and " a_sig " in text
    assert f"waveform: {r.waves}" in r.summary()
    plain = run_or_skip("mac-fp4", suite="exhaustive", sim=sim, test_dir=tmp_path / "plain")
    assert plain.waves is None and not list((tmp_path / "plain").glob("*.vcd"))


def test_saif_activity_of_one_lane_for_the_power_flow(tmp_path):
    r = run_or_skip("mac-dialectfp4-decode", vectors=3000, sim="verilator", test_dir=tmp_path,
                    activity="saif")
    assert r.ok and r.lanes == 1 and r.activity == tmp_path / "mac-dialectfp4-decode.saif"
    head = r.activity.read_text()[:2000]
    assert "SAIFILE" in head and "DURATION" in head
    act = r.input_activity
    assert set(act) >= {"a", "w", "valid", "clear", "a_dialect", "a_se"}
    assert all(0.0 <= v["activity"] <= 1.0 and 0.0 <= v["duty"] <= 1.0 for v in act.values())
    assert act["a"]["activity"] > 0.2  # random operands toggle


def test_fst_needs_lz4_on_verilator(tmp_path):
    from mactile.sim.simulators import verilator_fst_missing

    if verilator_fst_missing():
        with pytest.raises(ValueError, match="liblz4-dev"):
            run_or_skip("mac-int4", sim="verilator", waves="fst", test_dir=tmp_path)
    else:
        r = run_or_skip("mac-int4", sim="verilator", waves="fst", vectors=500, test_dir=tmp_path)
        assert r.waves.exists()


def test_bad_requests_are_named():
    with pytest.raises(ValueError, match="activity='saif' is not available on icarus"):
        run_or_skip("mac-int4", sim="icarus", activity="saif")
    with pytest.raises(ValueError, match="unknown suite 'full'"):
        run_or_skip("mac-int4", suite="full")
    with pytest.raises(ValueError, match="unknown parameter"):
        run_or_skip("mac-int4", params={"bits": 4})
    with pytest.raises(ValueError, match="fixed size"):
        run_or_skip("mac-int4", suite="exhaustive", vectors=10)
    with pytest.raises(ValueError, match="lanes must be a positive integer"):
        run_or_skip("mac-int4", lanes=0)


# ------------------------------------------------------------------ the command line
def test_cli_sim_prints_vectors_mismatches_and_rate(tmp_path, capsys):
    from mactile.cli.main import main

    sim = first_available()
    rc = main(["sim", "mac-int5", "--sim", sim, "--exhaustive", "--out", str(tmp_path),
               "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "vectors checked: 1," in out and "mismatches:      0" in out and "vectors/s:" in out
    assert json.loads((tmp_path / "r.json").read_text())["suite"] == "exhaustive"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("terms: 16\n")
    rc = main(["sim", "mac-int5", "--sim", quickest_build(), "--config", str(cfg),
               "--vectors", "3000", "--seed", "3", "--out", str(tmp_path / "t16")])
    assert rc == 0 and "suite random, seed 3" in capsys.readouterr().out


def test_cli_sim_errors(tmp_path, capsys):
    from mactile.cli.main import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("- not a mapping\n")
    assert main(["sim", "mac-int4", "--config", str(cfg)]) == 2
    assert "must hold a mapping" in capsys.readouterr().err
    assert main(["sim", "mac-int4", "--config", str(tmp_path / "none.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["sim", "mac-int4", "--suite", "full"]) == 2
    assert "unknown suite 'full'" in capsys.readouterr().err


def test_decoded_first_failure_names_operands_and_values():
    """The MAC bench's decoder on a synthetic mismatch (no simulator needed)."""
    from mactile.sim.bench import Mismatch
    from mactile.sim.benches.mac import MacBench

    b = MacBench(**DESIGNS["mac-fp4"].params)
    v = b.vectors("exhaustive", lanes=2, count=None, rng=np.random.default_rng(0))
    got = {"acc": v.expected["acc"].copy()}
    got["acc"][3, 1] += 1
    m = Mismatch(3, 1, "acc", int(v.expected["acc"][3, 1]), int(got["acc"][3, 1]))
    text = b.describe(v, m, got)
    assert text.startswith("cycle 3 lane 1 [exhaustive operand pairs]")
    assert "(fp4_e2m1 " in text and "x 2^-2" in text and f"got {m.got}" in text
