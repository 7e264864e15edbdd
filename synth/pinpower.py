"""Power from per-net toggle rates, with OpenSTA's own per-pin energies.

OpenSTA's power of one cell pin is linear in that pin's activity ``a`` (transitions per
clock period): switching ``0.5 C V^2 a / T`` on an output pin, internal power ``a / T``
times the energy its liberty tables give for the pin's slew and load. Debian's OpenSTA
cannot be given the activity of internal pins (its propagation overwrites them), but
with ``sta::set_debug power 2`` it prints every pin's internal and switching power. So:

1. OpenSTA runs once with every net at the same activity ``A`` (``set_power_activity
   -global``) and debug printing on (``scripts/sta.tcl``, activity ``pin_energies``).
2. :func:`parse_pin_energies` reads every pin's power at ``A`` from the debug lines and
   checks that their sum is OpenSTA's own total (within the 3 digits the lines carry),
   so a tool whose arithmetic or output differs is refused, not misread.
3. :func:`power_at_rates` scales each pin by its net's simulated toggle rate over ``A``.
   Pins on the clock keep the clock's activity; leakage is OpenSTA's.

The result is what OpenSTA computes with per-net activity, the same arithmetic as its
report; in the 2019 build a pin's internal power is the sum over its liberty arcs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .tools import ToolError

__all__ = ["PinEnergies", "parse_pin_energies", "power_at_rates"]

#: Relative agreement required between the pins' sum and OpenSTA's total: each debug
#: line carries 3 significant digits (rounding error up to 0.5% per line, far less on a
#: sum of many).
TOLERANCE = 2e-3

_TOTAL = re.compile(r"^Total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", re.M)


@dataclass(frozen=True)
class PinEnergies:
    """Every pin's power at one uniform activity (watts).

    Attributes
    ----------
    activity : float
        The uniform activity (transitions per clock period) the powers were printed at.
    pins : dict of str -> (float, float)
        ``instance/PIN`` -> (internal, switching), for pins not on the clock.
    clock : (float, float)
        Internal and switching power of the pins on the clock (at the clock's activity).
    leakage : float
    reference : dict of str -> float
        OpenSTA's own totals at ``activity`` (internal, switching, leakage, total).
    """

    activity: float
    pins: dict
    clock: tuple
    leakage: float
    reference: dict


def _arc_power(line: str) -> float | None:
    """The power column of an arc line (``FROM -> TO [WHEN] act duty energy power PG``)."""
    tokens = line.split()
    if "->" not in tokens:
        return None
    rest = tokens[:-2] if tokens[-2:] == ["no", "pg_pin"] else tokens[:-1]
    try:
        return float(rest[-1])
    except (ValueError, IndexError):
        return None


def parse_pin_energies(out: str, *, activity: float, clock_pins=frozenset()) -> PinEnergies:
    """Read the per-pin power lines of ``report_power`` under ``set_debug power 2``.

    Parameters
    ----------
    out : str
        OpenSTA's output (debug lines and the report).
    activity : float
        The uniform activity the run used.
    clock_pins : set of str
        Pins on the clock net.

    Raises
    ------
    ToolError
        No debug lines, or their sum disagrees with the report's totals.
    """
    internal: dict[str, float] = {}
    switching: dict[str, float] = {}
    leakage = 0.0
    pin = None
    pending_switching = None
    for line in out.splitlines():
        if not line.startswith("power:"):
            continue
        body = line[len("power:"):]
        if body.startswith(" internal "):
            pin = body.split()[1]
            internal.setdefault(pin, 0.0)
            if pending_switching is not None:  # printed just before its pin's internal lines
                switching[pin] = switching.get(pin, 0.0) + pending_switching
                pending_switching = None
        elif body.startswith(" switching "):
            pending_switching = float(body.split()[-1])
        elif body.startswith(" leakage cell "):
            leakage += float(body.split()[-1])
        elif pin is not None:
            p = _arc_power(body)
            if p is not None:
                internal[pin] += p
    m = _TOTAL.search(out.split("MACTILE_SECTION power", 1)[-1])
    if not internal or not m:
        raise ToolError("per-pin power: OpenSTA printed no debug power lines or no total "
                        "(set_debug power 2 unsupported?)")
    ref = dict(zip(("internal", "switching", "leakage", "total"), map(float, m.groups())))
    for key, mine in (("internal", sum(internal.values())),
                      ("switching", sum(switching.values()))):
        if abs(mine - ref[key]) > TOLERANCE * max(abs(ref[key]), 1e-30):
            raise ToolError(f"per-pin power: the pins' {key} power sums to {mine:.6e} W but "
                            f"OpenSTA reports {ref[key]:.6e} W; this OpenSTA's power "
                            f"arithmetic or debug output differs from the one this reader "
                            f"was written for (Debian's 2019 build)")
    clock = (sum(v for p, v in internal.items() if p in clock_pins),
             sum(v for p, v in switching.items() if p in clock_pins))
    pins = {p: (internal[p], switching.get(p, 0.0)) for p in internal if p not in clock_pins}
    return PinEnergies(activity=activity, pins=pins, clock=clock, leakage=ref["leakage"],
                       reference=ref)


#: Transitions per clock period of a clock net.
CLOCK_ACTIVITY = 2.0


def power_at_rates(e: PinEnergies, rates: dict, *, clock_rate_pins=frozenset()) -> dict:
    """Power (mW: internal, switching, leakage, total) with each pin at its net's rate.

    Parameters
    ----------
    rates : dict of str -> float
        Toggle rate (transitions per clock cycle) of the net on every pin.
    clock_rate_pins : set of str
        Pins OpenSTA printed at the clock's activity rather than the uniform one: those
        on a gated clock (OpenSTA propagates the clock through an integrated clock-gate
        cell; measured on NanGate45's CLKGATE_X1 and sky130's dlclkp_1, whose output and
        the flip-flop clock pins it drives print the clock's 2 transitions per period).
        Scaled by their rate over :data:`CLOCK_ACTIVITY`.

    Raises
    ------
    ToolError
        A pin with power in OpenSTA's report has no simulated rate.
    """
    internal, switching = e.clock
    missing = []
    for pin, (pi, ps) in e.pins.items():
        r = rates.get(pin)
        if r is None:
            if pi or ps:
                missing.append(pin)
            continue
        scale = r / (CLOCK_ACTIVITY if pin in clock_rate_pins else e.activity)
        internal += pi * scale
        switching += ps * scale
    if missing:
        raise ToolError(f"per-pin power: {len(missing)} pin(s) with power have no simulated "
                        f"toggle rate, e.g. {', '.join(sorted(missing)[:5])}")
    watts = {"internal": internal, "switching": switching, "leakage": e.leakage}
    watts["total"] = internal + switching + e.leakage
    return {k: v * 1e3 for k, v in watts.items()}
