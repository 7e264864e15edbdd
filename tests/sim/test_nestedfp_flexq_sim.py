"""The NestedFP PE (and its plain FP16/FP8 baselines) and the FlexQ group dot-product units
(and their INT6/INT8 multiplier baselines) against their golden models, exactly: every
stored byte pair and every E4M3 pair / every INT6 pair on every lane, the corner streams,
random sums. Deliberately broken units are caught."""
import pytest

from mactile.sim.testing import quickest_build, run_or_skip

pytest.importorskip("amaranth")

from mactile.rtl.fp4tc.fp32add import FP32Adder  # noqa: E402
from mactile.rtl.mac.intgroup_dot import IntGroupDot  # noqa: E402
from mactile.rtl.mac.nestedfp_pe import NestedFpPe  # noqa: E402

pytestmark = pytest.mark.sim


def test_nestedfp_pe_every_byte_pair_and_every_e4m3_pair(tmp_path):
    r = run_or_skip("nestedfp-pe", suite="exhaustive", sim="verilator", test_dir=tmp_path)
    assert r.ok, r.summary()
    assert r.vectors >= 2 * 65536


def test_nestedfp_pe_random_sums(tmp_path):
    r = run_or_skip("nestedfp-pe", suite="random", vectors=65536, seed=3, sim="verilator",
                    test_dir=tmp_path)
    assert r.ok, r.summary()
    assert r.vectors >= 65536


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fp16-mac", "fp8-mac"])
@pytest.mark.parametrize("suite", ["exhaustive", "random"])
def test_plain_fp_macs(name, suite, tmp_path):
    r = run_or_skip(name, suite=suite, sim="verilator", test_dir=tmp_path)
    assert r.ok, r.summary()
    assert r.vectors >= 65536


@pytest.mark.slow
def test_nestedfp_pe_a_million_random_vectors(tmp_path):
    r = run_or_skip("nestedfp-pe", suite="random", vectors=1_000_000, seed=11,
                    sim="verilator", test_dir=tmp_path)
    assert r.ok and r.vectors >= 1_000_000, r.summary()


class _NoStickyAdder(FP32Adder):
    """Rounds on the guard bit and the LSB only: the round and sticky bits dropped."""

    @staticmethod
    def round_up(lsb, guard, rest):
        return guard & lsb


class _NoStickyPe(NestedFpPe):
    adder_cls = _NoStickyAdder


def test_pe_with_a_dropped_rounding_bit_is_caught(tmp_path):
    r = run_or_skip("nestedfp-pe", component=_NoStickyPe(), suite="random", vectors=4096,
                    sim=quickest_build(), test_dir=tmp_path)
    assert not r.ok
    assert r.mismatched > 0 and "acc expected" in r.mismatches[0].text


def test_flexq_int6_every_pair_on_every_lane(tmp_path):
    r = run_or_skip("flexq-int6-dot", suite="exhaustive", sim="verilator", test_dir=tmp_path)
    assert r.ok, r.summary()
    assert r.vectors >= 17 * 4096  # all lanes at once, then each lane alone


def test_flexq_int6_random_groups(tmp_path):
    r = run_or_skip("flexq-int6-dot", suite="random", vectors=65536, seed=5, sim="verilator",
                    test_dir=tmp_path)
    assert r.ok, r.summary()


@pytest.mark.slow
def test_flexq_int6_a_million_random_vectors(tmp_path):
    r = run_or_skip("flexq-int6-dot", suite="random", vectors=1_000_000, seed=13,
                    sim="verilator", test_dir=tmp_path)
    assert r.ok and r.vectors >= 1_000_000, r.summary()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["int6-mult-dot", "int8-mult-dot"])
@pytest.mark.parametrize("suite", ["exhaustive", "random"])
def test_multiplier_dot_baselines(name, suite, tmp_path):
    r = run_or_skip(name, suite=suite, sim="verilator", test_dir=tmp_path)
    assert r.ok, r.summary()


class _UnsignedTopPlane(IntGroupDot):
    """Reads the top bit plane as +2**5 (unsigned codes) instead of -2**5."""

    def plane_sign(self, s, t):
        return 1


def test_bitplane_unit_with_unsigned_top_plane_is_caught(tmp_path):
    r = run_or_skip("flexq-int6-dot", component=_UnsignedTopPlane(), suite="random",
                    vectors=2048, sim=quickest_build(), test_dir=tmp_path)
    assert not r.ok
    assert "max positive sum" in r.mismatches[0].text or r.mismatched > 0
