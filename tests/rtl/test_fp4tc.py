"""Generation and parameter checks of the RaZeR/NVFP4 decoders and tensor cores (no
simulator: the simulations are in tests/sim/test_fp4tc_sim.py)."""
import pytest

pytest.importorskip("amaranth")
# Components built only to read their properties are never elaborated: expected here.
pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

from amaranth.back import verilog  # noqa: E402

from mactile.golden.tensorcore import RAZER_ACT, RAZER_WEIGHT, FixedAccumulator  # noqa: E402
from mactile.rtl.fp4tc.decoders import DecoderUnit  # noqa: E402
from mactile.rtl.fp4tc.tensorcore import TensorCore  # noqa: E402
from mactile.rtl.registry import DESIGNS  # noqa: E402

NAMES = ["nvfp4-decoder", "razer-weight-decoder", "razer-act-decoder", "fp32-adder",
         "nvfp4-tc", "razer-tc"]


@pytest.mark.parametrize("name", NAMES)
def test_registered_designs_generate(name):
    d = DESIGNS[name]
    small = {"rows": 2} if name.endswith("-tc") else {}
    comp = d.build(**small)
    text = verilog.convert(comp, name=comp.module_name)
    assert f"module {comp.module_name}" in text
    assert isinstance(comp.latency, int)


def test_tensor_core_properties():
    tc = TensorCore(rows=2, weight="razer", weight_scale="e3m3", act="razer-act")
    assert tc.spec.weight is RAZER_WEIGHT and tc.spec.act is RAZER_ACT
    assert tc.latency == 3 and tc.throughput["macs_per_cycle"] == 32
    assert tc.module_name == "tc_razer_razer_act_2x16_b16_fp32_l3"
    tc = TensorCore(rows=2, cols=4, acc="fixed", pipeline=["scaled", "input"])
    assert tc.pipeline == ("input", "scaled") and tc.latency == 3 and tc.beats == 4
    assert tc.throughput["blocks_per_cycle"] == 0.25
    assert isinstance(tc.spec.acc, FixedAccumulator) and tc.spec.acc.width == 62
    assert TensorCore(rows=1, pipeline=[]).latency == 1
    # identical accumulators in both cores
    a = TensorCore(rows=1, acc="fixed").spec.acc
    b = TensorCore(rows=1, acc="fixed", weight="razer", weight_scale="e3m3", act="razer-act").spec.acc
    assert a == b


@pytest.mark.parametrize("kwargs, match", [
    ({"pipeline": ["dot", "bogus"]}, "pipeline cuts must be distinct names"),
    ({"weight": "razer", "weight_scale": "e4m3"}, "more than the 8-bit scale byte"),
    ({"weight": "int4"}, "unknown element decoder"),
    ({"act_scale": "e5m2"}, "unknown scale format"),
    ({"cols": 5}, "must divide block_size"),
    ({"acc": "fixed", "acc_frac_bits": 8}, "frac_bits >= 20"),
    ({"acc_int_bits": 40}, "apply to acc='fixed' only"),
    ({"acc": "bfloat16"}, "unknown accumulator"),
    ({"block_size": 1024, "cols": 16}, "exact in FP32"),
    ({"weight": "razer", "weight_scale": "e3m3", "w_specials": [5.0]}, "needs 2 special"),
    ({"weight": "razer", "weight_scale": "e3m3", "w_specials": [5.0, 10.0]}, "out of range"),
])
def test_tensor_core_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TensorCore(rows=1, **kwargs)


def test_decoder_parameters():
    d = DecoderUnit(operand="razer", specials=[2.5, 9.5])
    assert d.reset_offsets == (0b1111, 0b0111)
    with pytest.raises(ValueError, match="unknown operand"):
        DecoderUnit(operand="int4")
    with pytest.raises(ValueError, match="needs 1 special"):
        DecoderUnit(operand="razer-act", specials=[5.0, 6.0])
    with pytest.raises(ValueError, match="off the 0.5 grid"):
        DecoderUnit(operand="razer-act", specials=[5.25])


# ------------------------------------------------------------------ output-stationary
@pytest.mark.parametrize("name", ["nvfp4-tc-os", "razer-tc-os", "mxfp4-tc-os"])
def test_outer_designs_generate(name):
    comp = DESIGNS[name].build(rows=2, cols=3)
    text = verilog.convert(comp, name=comp.module_name)
    assert f"module {comp.module_name}" in text
    # the organisation: one decoder per activation row and weight column, a unit per pair
    for sub in ("a_dec0", "a_dec1", "w_dec2", "u0_0", "u1_2", "u1_2.acc_add"):
        assert f"module \\{comp.module_name}.{sub} (" in text


def test_outer_core_properties():
    from mactile.rtl.fp4tc.outer import OuterCore

    tc = OuterCore()
    assert (tc.os_spec.rows, tc.os_spec.cols, tc.beats, tc.latency) == (16, 16, 16, 3)
    assert tc.throughput["macs_per_cycle"] == 256 and tc.throughput["blocks_per_cycle"] == 1 / 16
    assert tc.module_name == "tc_os_nvfp4_nvfp4_16x16_k1_b16_fp32_unit_l3"
    tc = OuterCore(rows=2, cols=3, k_per_cycle=4, acc="fixed", weight="razer",
                   weight_scale="e3m3", act="razer-act", pipeline=["scaled", "input"])
    assert tc.pipeline == ("input", "scaled") and tc.beats == 4 and tc.latency == 3
    assert tc.module_name == "tc_os_razer_razer_act_2x3_k4_b16_fixed_unit_l3"
    assert tc.throughput["macs_per_cycle"] == 24
    row = OuterCore(rows=2, cols=3, drain="row")
    assert row.column_latency == (4, 5, 6) and row.latency == 6
    assert row.module_name == "tc_os_nvfp4_nvfp4_2x3_k1_b16_fp32_row_l6"
    assert OuterCore(rows=2, cols=3).column_latency == (3, 3, 3)
    # hours of Yosys at 16 x 16: out of the default report
    assert not DESIGNS["razer-tc-os"].in_default_report and DESIGNS["razer-tc"].in_default_report
    # the unit's arithmetic is the row core's: the same spec as a TensorCore row
    assert tc.spec == TensorCore(rows=3, cols=4, acc="fixed", weight="razer",
                                 weight_scale="e3m3", act="razer-act").spec


@pytest.mark.parametrize("kwargs, match", [
    ({"pipeline": ["dot", "bogus"]}, "pipeline cuts must be distinct names"),
    ({"k_per_cycle": 3}, "k_per_cycle \\(3\\) must divide block_size"),
    ({"drain": "shared"}, "unknown drain"),
    ({"drain": "row", "cols": 8, "k_per_cycle": 4}, "must not exceed the beats per block"),
    ({"cols": 0}, "cols must be"),
    ({"weight": "razer", "weight_scale": "e3m3", "w_specials": [5.0]}, "needs 2 special"),
])
def test_outer_core_rejects_bad_parameters(kwargs, match):
    from mactile.rtl.fp4tc.outer import OuterCore

    with pytest.raises(ValueError, match=match):
        OuterCore(rows=1, **kwargs)
