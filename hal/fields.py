"""What a target file may hold, said once, on the dataclasses themselves.

`edgetune.hal.loader` reads a target file by walking the fields of `Target` and of the
dataclasses it holds: each field is one key, its type hint says what the key holds (a
string, a number, a table, an array of tables), its default says whether it may be left
out. What a type cannot say goes in the field's metadata, written with `spec(...)`:

    key            the TOML key when it is not the field's name
    within         a `Range` a number (or each number of an array) must lie in
    one_of         the values a string (or each string of an array) may take
    check          the name of a loader check for a value or an array (`VALUE_CHECKS`,
                   `ARRAY_CHECKS` in the loader: names, program names, flags, references)
    default        the value when the key is left out, when it differs from the field's own
                   default (flags, for one, are optional in the file but not in the dataclass)
    required       True: the key must be written although the field has a default
    required_when  a condition (`CONDITIONS` in the loader) under which the key is required
    read_when      a condition outside which the key is not read at all (the field's default)
    default_when   (condition, value): the default under that condition
    names          for a table of named entries: the names it must hold, in this order
    unique         True: the entries of an array of tables have distinct names
    at_least_one   the noun for "at least one ... is required" on an empty array of tables
    in_file        False: the field does not come from the file (the loader fills it in)

Adding a key to target files is adding a field here; the loader needs no change unless the
key needs a new kind of check. Imports nothing: model and cost both use it.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any

RULES = frozenset({"key", "within", "one_of", "check", "default", "required", "required_when", "read_when",
                   "default_when", "names", "unique", "at_least_one", "in_file"})


@dataclass(frozen=True)
class Range:
    """The numbers a key may hold: [low, high], or (low, high] when low_open; no high: unbounded."""

    low: float
    high: float | None = None
    low_open: bool = False


POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
# Ranges no real part lies outside: 1 kHz .. 10 GHz clocks, a day of timeout, 1 kW, 1 uJ
# per instruction or access, a million cycles per instruction class (wait states too).
CLOCK_HZ_RANGE = (1_000, 10_000_000_000)
MAX_TIMEOUT_S = 86_400.0
MAX_POWER_MW = 1_000_000.0
MAX_ENERGY_PJ = 1_000_000.0
MAX_CYCLES = 1_000_000.0
CLOCK_HZ = Range(*CLOCK_HZ_RANGE)
TIMEOUT_S = Range(0, MAX_TIMEOUT_S, low_open=True)
POWER_MW = Range(0, MAX_POWER_MW)
ACTIVE_POWER_MW = Range(0, MAX_POWER_MW, low_open=True)
ENERGY_PJ = Range(0, MAX_ENERGY_PJ)
CYCLES = Range(0, MAX_CYCLES)


def spec(field_default: Any = MISSING, /, **rules: Any) -> Any:
    """A dataclass field (with `field_default` as its default) and the rules its key in a
    target file follows (see the module docstring)."""
    unknown = set(rules) - RULES
    if unknown:
        raise TypeError(f"unknown field rules: {', '.join(sorted(unknown))}")
    return field(default=field_default, metadata=rules)
