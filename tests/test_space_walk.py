"""The legal points of a space are found by walking it, pruned by constraints that declare
what they read (edgetune.tuner.legal): the same points, in the same order, as listing the
whole product, without touching it whole."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from edgetune.tuner import Constraint, RandomSearch, Space, SpaceError, choice, make_strategy
from edgetune.tuner.legal import WalkCount, legal_digits


def counted(check, calls: list):
    def wrapped(values):
        calls.append(1)
        return check(values)
    return wrapped


def synthetic(values: int, calls: list | None = None) -> Space:
    """Seven parameters of `values` values each, four constraints over pairs and singles."""
    calls = [] if calls is None else calls
    params = [choice(name, range(values)) for name in "abcdefg"]
    return Space(params, [
        Constraint("a at most b", counted(lambda c: c["a"] <= c["b"], calls), reads=("a", "b")),
        Constraint("c and d add up to the largest value", counted(lambda c: c["c"] + c["d"] == values - 1, calls),
                   reads=("c", "d")),
        Constraint("e even", counted(lambda c: c["e"] % 2 == 0, calls), reads=("e",)),
        Constraint("f at least g", counted(lambda c: c["f"] >= c["g"], calls), reads=("g", "f")),
    ])


def listed(space: Space) -> np.ndarray:
    """What a space was before: every point of the product, checked one by one."""
    return np.asarray([i for i in range(space.cartesian_size) if space.is_legal(space.config_at(i))], dtype=np.int64)


def test_the_walk_finds_the_listed_points_in_ascending_order():
    space = synthetic(5)
    legal = space.legal_indices()
    assert np.array_equal(legal, listed(synthetic(5)))
    assert len(legal) == 15 * 5 * 3 * 15  # a<=b, c+d=4, e even, f>=g over 5 values each
    rows = space.legal_digits()
    assert [space.index_from_digits(row) for row in rows[:50]] == list(legal[:50])


def test_a_ten_million_point_space_is_walked_in_megabytes_touching_a_few_hundred_combinations():
    calls: list = []
    space = synthetic(10, calls)
    assert space.cartesian_size == 10 ** 7
    count = WalkCount()
    tracemalloc.start()
    try:
        digits = legal_digits(space.params, space.constraints, count)
        legal = space.legal_indices()
        strategy = RandomSearch(space, np.random.default_rng(0))
        proposals = strategy.ask(16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    expected = 55 * 10 * 5 * 55  # a<=b: 55 pairs of 100, c+d=9: 10, e even: 5, f>=g: 55
    assert len(digits) == len(legal) == expected
    # Each constraint is decided once per combination of what it reads (100 + 100 + 10 + 100
    # here, in both walks), never per point; the tree grows ~3% of the product's prefixes.
    assert len(calls) == 2 * (100 + 100 + 10 + 100)
    assert count.rows < 10 ** 7 // 20 and count.peak_rows < 10 ** 6
    assert peak < 48 * 2 ** 20  # bytes: the product's indices alone would take 80 MB
    assert len(proposals) == 16 and all(space.is_legal(config) for config in proposals)
    assert all(space.is_legal_index(space.index_of(config)) for config in proposals)
    assert not space.is_legal_index(space.index_of({name: 0 for name in "abcdefg"}))  # c + d != 9


def test_a_constraint_reading_what_it_does_not_declare_is_named():
    space = Space([choice("a", [1, 2]), choice("b", [1, 2])],
                  [Constraint("a below b", lambda c: c["a"] < c["b"], reads=("a",))])
    with pytest.raises(SpaceError, match=r"'a below b' reads 'b' but declares only a"):
        space.legal_indices()


def test_a_constraint_declaring_an_unknown_parameter_is_named():
    space = Space([choice("a", [1, 2])], [Constraint("tile fits", lambda c: c["tile"] < 4, reads=("tile",))])
    with pytest.raises(SpaceError, match=r"'tile fits' reads 'tile', which is not a parameter"):
        space.legal_indices()


def test_undeclared_and_constant_constraints_still_hold():
    params = [choice("a", range(4)), choice("b", range(4))]
    free = Space(params, [Constraint("a + b odd", lambda c: (c["a"] + c["b"]) % 2 == 1),
                          Constraint("a at most b", lambda c: c["a"] <= c["b"], reads=("a", "b"))])
    assert np.array_equal(free.legal_indices(), listed(free)) and len(free) == 4
    assert len(Space(params, [Constraint("never", lambda c: False, reads=())])) == 0
    assert len(Space(params, [Constraint("always", lambda c: True, reads=())])) == 16


def test_seeded_strategies_propose_alike_on_a_walked_and_a_listed_space():
    walked = synthetic(4)
    given = Space(walked.params, walked.constraints, legal=listed(walked))  # the legal points known in advance
    for name in ("random", "annealing", "genetic", "local", "model"):
        runs = []
        for space in (walked, given):
            strategy = make_strategy(name, space, np.random.default_rng(11), "cycles", budget=24)
            runs.append([config.key() for config in strategy.ask(6)])
        assert runs[0] == runs[1], name
