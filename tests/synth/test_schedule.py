"""The report's job order (mactile.synth.report.schedule): longest first."""
import json

from mactile.synth.libraries import cache_dir
from mactile.synth.report import schedule
from mactile.synth.rtl import Rtl


def _rtls(**sizes):
    return {n: Rtl(n, n, "x" * size, (), None, None) for n, size in sizes.items()}


def test_fresh_cache_orders_by_verilog_size():
    assert schedule(_rtls(small=10, big=1000, mid=100), "osu018") == ["big", "mid", "small"]


def test_measured_times_first_and_unmeasured_designs_estimated_high():
    (cache_dir()).mkdir(parents=True, exist_ok=True)
    (cache_dir() / "timings.json").write_text(json.dumps(
        {"tc@osu018": 200.0, "mac@osu018": 2.0, "tc@sky130": 1.0}))
    # Measured on osu018: tc 0.2 s/byte, mac 0.02 s/byte; "new" (500 bytes) is estimated at
    # the highest rate, 100 s, between the two.
    order = schedule(_rtls(mac=100, tc=1000, new=500), "osu018")
    assert order == ["tc", "new", "mac"]
    # Another library's times do not count.
    assert schedule(_rtls(mac=100, tc=1000), "nangate45") == ["tc", "mac"]
