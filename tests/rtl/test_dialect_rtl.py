"""Construction, validation and properties of the dialect RTL components (no simulator)."""
import pytest

pytest.importorskip("amaranth", reason="needs the [sim] extra (Amaranth)")

from mactile.rtl.dialect.common import parse_registers  # noqa: E402
from mactile.rtl.dialect.dequantizer import DialectDequantizer, shared_table  # noqa: E402
from mactile.rtl.dialect.mse import MSE_BOUNDARIES, DialectMseSelector  # noqa: E402
from mactile.rtl.dialect.quantizer import QUANTIZER_BOUNDARIES, DialectQuantizer  # noqa: E402
from mactile.rtl.registry import get_design  # noqa: E402

# Components built only to read their properties are never elaborated (on purpose).
pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


@pytest.mark.parametrize("registers, latency", [
    (QUANTIZER_BOUNDARIES, 5), ("align,pair,quantize", 3), ("none", 0), ("", 0),
    (["quantize", "exp_max"], 2),
])
def test_quantizer_latency_is_the_number_of_registered_boundaries(registers, latency):
    q = DialectQuantizer(registers=registers)
    assert q.latency == latency and q.throughput == 1.0
    assert list(q.registers) == [b for b in QUANTIZER_BOUNDARIES if b in q.registers]


def test_defaults_match_the_paper_latencies():
    assert get_design("dialect-quantizer").build().latency == 5        # Table 6
    assert get_design("dialect-dequantizer").build().latency == 1      # Table 6
    assert get_design("dialect-mse-selector").build().latency == 8     # Table 7
    assert len(MSE_BOUNDARIES) == 8


@pytest.mark.parametrize("cls, kw, exc, msg", [
    (DialectQuantizer, {"block_size": 33}, ValueError,
     r"DialectQuantizer: block_size must be one of \(16, 32, 64\), got 33"),
    (DialectQuantizer, {"block_size": "32"}, TypeError, "block_size must be an int"),
    (DialectQuantizer, {"count_tie": "left"}, ValueError,
     r"count_tie must be one of \['even', 'odd'\], got 'left'"),
    (DialectQuantizer, {"registers": "align,bogus"}, ValueError,
     "unknown pipeline boundary 'bogus'; known: exp_max, align, pair, count, quantize"),
    (DialectQuantizer, {"registers": "align,align"}, ValueError, "listed twice"),
    (DialectQuantizer, {"registers": 5}, TypeError, "registers must be a sequence"),
    (DialectMseSelector, {"frac_bits": 1}, ValueError,
     "DialectMseSelector: MseFixedPoint: frac_bits must be in 2..8, got 1"),
    (DialectMseSelector, {"registers": "pair"}, ValueError, "unknown pipeline boundary 'pair'"),
    (DialectDequantizer, {"registered": 1}, TypeError, "registered must be a bool"),
    (DialectDequantizer, {"block_size": 8}, ValueError, "block_size must be one of"),
])
def test_bad_parameters_are_named(cls, kw, exc, msg):
    with pytest.raises(exc, match=msg):
        cls(**kw)


def test_unknown_design_parameter_is_named():
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['frac_bits'\]"):
        get_design("dialect-quantizer").build(frac_bits=4)


def test_parse_registers_keeps_datapath_order():
    assert parse_registers("X", "quantize, align", QUANTIZER_BOUNDARIES) == ("align", "quantize")


def test_shared_table_is_derived_from_the_formatbook():
    # Indices 0-4 hold the same value in all 16 dialects; 5 differs only in dialect 15.
    assert shared_table() == [0, 1, 2, 3, 4, None, None, None]


def test_module_names_carry_the_parameters():
    assert DialectQuantizer(block_size=16, count_tie="odd").module_name == \
        "dialect_quantizer_b16_odd_l5"
    assert DialectMseSelector(frac_bits=4, err_frac_bits=3).module_name == \
        "dialect_mse_b32_f4g3_l8"
    assert DialectMseSelector(dialects_per_cycle=8).module_name == "dialect_mse_b32_f6g6_d8_l8"
    assert DialectMseSelector(dialects_per_cycle=8).throughput == 0.5
    with pytest.raises(ValueError, match="dialects_per_cycle must be one of"):
        DialectMseSelector(dialects_per_cycle=3)
    assert DialectDequantizer(registered=False).module_name == "dialect_dequantizer_b32_l0"


def test_waveform_signals_are_name_patterns():
    sigs = DialectQuantizer(block_size=16).waveform_signals
    assert "pair_pair" in sigs and "mag_trunc_*" in sigs
    assert all("'" not in s for s in sigs)
