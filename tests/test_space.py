"""Search spaces (mixed-radix indexing, constraints) and the strategies that walk them."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgetune.codegen import get_kernel
from edgetune.targets import get_target
from edgetune.tuner import (Constraint, Exhaustive, Outcome, RandomSearch, Space, SpaceError, Trial, choice,
                            make_strategy, powers_of_two)


def small_space(constraints=()) -> Space:
    # 3 * 2 * 3 = 18 points, with int, str and power-of-two parameters.
    return Space([choice("a", [1, 2, 3]), choice("b", ["x", "y"]), powers_of_two("c", 1, 4)], constraints)


def grid_space() -> Space:
    # 10 x 10 grid minus the anti-diagonal a + b == 5: 94 legal points.
    return Space([choice("a", range(10)), choice("b", range(10))],
                 [Constraint("a + b must not be 5", lambda c: c["a"] + c["b"] != 5, reads=("a", "b"))])


def drain(strategy, batch: int = 7) -> list:
    """Ask in batches until the strategy has nothing left."""
    out = []
    for _ in range(10_000):  # bound: a strategy that never runs dry fails instead of hanging
        got = strategy.ask(batch)
        if not got:
            return out
        out.extend(got)
    raise AssertionError("strategy never ran out of proposals")


# --- indexing ---------------------------------------------------------------------------------
def test_powers_of_two_values():
    assert powers_of_two("c", 1, 4).values == (1, 2, 4)
    assert powers_of_two("t", 3, 40).values == (4, 8, 16, 32)  # rounds the low end up
    with pytest.raises(SpaceError):
        powers_of_two("bad", 8, 4)


def test_index_round_trip_over_every_point():
    space = small_space()
    assert space.cartesian_size == 18
    configs = [space.config_at(i) for i in range(space.cartesian_size)]
    for i, config in enumerate(configs):
        assert space.index_of(config) == i
        assert space.index_of(config.as_dict()) == i  # a plain mapping indexes the same
        assert space.make(config.as_dict()) == config
    # A bijection onto the Cartesian product, every parameter in its own order.
    assert {tuple(c.as_dict().values()) for c in configs} == set(itertools.product([1, 2, 3], ["x", "y"], [1, 2, 4]))
    assert all(c.items[i][0] == name for c in configs for i, name in enumerate(space.names))


@pytest.mark.parametrize("index", [-1, 18, 10**6])
def test_index_outside_the_space(index):
    with pytest.raises(SpaceError, match=str(index)):
        small_space().config_at(index)


def test_make_rejects_an_unknown_parameter_name():
    with pytest.raises(SpaceError, match="'tile_q'"):
        small_space().make({"a": 1, "b": "x", "c": 2, "tile_q": 4})


def test_make_rejects_a_missing_parameter():
    with pytest.raises(SpaceError, match="'c'"):
        small_space().make({"a": 1, "b": "x"})


@pytest.mark.parametrize("values, name, bad", [
    ({"a": 7, "b": "x", "c": 1}, "'a'", "7"),
    ({"a": 1, "b": "z", "c": 1}, "'b'", "'z'"),
    ({"a": 1, "b": "x", "c": 3}, "'c'", "3"),  # 3 is not a power of two
])
def test_make_rejects_an_unknown_value(values, name, bad):
    with pytest.raises(SpaceError) as info:
        small_space().make(values)
    assert name in str(info.value) and bad in str(info.value)


def test_config_key_is_canonical():
    space = small_space()
    config = space.make({"c": 4, "a": 2, "b": "y"})
    assert config.key() == "a=2,b=y,c=4"
    assert config["b"] == "y"
    with pytest.raises(KeyError):
        config["nope"]


def test_bad_parameters_are_refused():
    with pytest.raises(SpaceError):
        choice("empty", [])
    with pytest.raises(SpaceError):
        choice("twice", [1, 2, 1])
    with pytest.raises(SpaceError):
        Space([choice("a", [1]), choice("a", [2])])


# --- constraints ------------------------------------------------------------------------------
CONSTRAINTS = [
    Constraint("a * c at most 4", lambda c: c["a"] * c["c"] <= 4, reads=("a", "c")),
    Constraint("no a=3 with b=y", lambda c: not (c["a"] == 3 and c["b"] == "y"), reads=("a", "b")),
]


def test_constraints_filter_legal_points():
    space = small_space(CONSTRAINTS)
    brute = [p for p in itertools.product([1, 2, 3], ["x", "y"], [1, 2, 4])
             if p[0] * p[2] <= 4 and not (p[0] == 3 and p[1] == "y")]
    assert len(space) == len(brute) == 11
    assert sorted(tuple(c.as_dict().values()) for c in space) == sorted(brute)
    assert all(space.is_legal(c) for c in space)
    indices = [int(i) for i in space.legal_indices()]
    assert indices == sorted(set(indices))  # ascending, no repeats


def test_violation_names_the_reason():
    space = small_space(CONSTRAINTS)
    assert space.violation(space.make({"a": 3, "b": "y", "c": 1})) == "no a=3 with b=y"
    assert space.violation(space.make({"a": 2, "b": "x", "c": 4})) == "a * c at most 4"
    assert space.is_legal(space.make({"a": 1, "b": "y", "c": 4}))


# --- strategies -------------------------------------------------------------------------------
def test_random_search_is_reproducible_per_seed():
    space = grid_space()
    assert len(space) == 94
    first = RandomSearch(space, np.random.default_rng(42)).ask(30)
    again = RandomSearch(space, np.random.default_rng(42)).ask(30)
    other = RandomSearch(space, np.random.default_rng(43)).ask(30)
    assert first == again
    assert first != other
    # Not simply index order either: the sample is shuffled.
    assert first != list(space)[:30]


def test_random_search_covers_the_legal_space_once():
    space = grid_space()
    strategy = RandomSearch(space, np.random.default_rng(0))
    proposed = drain(strategy)
    assert all(space.is_legal(c) for c in proposed)
    assert len(proposed) == len(set(proposed)) == len(space)
    assert set(proposed) == set(space)
    assert strategy.ask(5) == []  # exhausted stays exhausted


def test_random_search_skips_told_configs():
    space = grid_space()
    told = [space.make({"a": a, "b": b}) for a, b in [(0, 0), (9, 9), (1, 1), (7, 2)]]
    strategy = RandomSearch(space, np.random.default_rng(5))
    # Failed trials count as evaluated too: a crash is not retried.
    strategy.tell([Trial(told[0], Outcome.OK, {"instructions": 10}), Trial(told[1], Outcome.CRASH),
                   Trial(told[2], Outcome.TIMEOUT), Trial(told[3], Outcome.WRONG_ANSWER)])
    proposed = drain(strategy)
    assert not set(told) & set(proposed)
    assert len(proposed) == len(space) - len(told)


def test_resumed_random_search_continues_the_same_sequence():
    # A crashed run told of its first 10 trials proposes what the uninterrupted run would have.
    space = grid_space()
    uninterrupted = RandomSearch(space, np.random.default_rng(9)).ask(25)
    resumed = RandomSearch(space, np.random.default_rng(9))
    resumed.tell(Trial(c, Outcome.OK) for c in uninterrupted[:10])
    assert resumed.ask(15) == uninterrupted[10:]


def test_exhaustive_yields_every_legal_point_once_in_order():
    space = small_space(CONSTRAINTS)
    proposed = drain(Exhaustive(space), batch=3)
    assert proposed == list(space)
    assert [space.index_of(c) for c in proposed] == [int(i) for i in space.legal_indices()]


def test_exhaustive_skips_told_configs():
    space = small_space(CONSTRAINTS)
    skip = list(space)[2]
    strategy = Exhaustive(space)
    strategy.tell([Trial(skip, Outcome.COMPILE_ERROR)])
    assert drain(strategy) == [c for c in space if c != skip]


def test_make_strategy():
    space = small_space()
    assert isinstance(make_strategy("random", space, np.random.default_rng(0)), RandomSearch)
    exhaustive = make_strategy("exhaustive", space, np.random.default_rng(0))
    assert isinstance(exhaustive, Exhaustive)
    assert exhaustive.ask(100) == list(space)
    with pytest.raises(ValueError, match="'anneal'"):
        make_strategy("anneal", space, np.random.default_rng(0))


# --- the matmul_s8 kernel's space -----------------------------------------------------------
MATMUL = get_kernel("matmul_s8")
SHAPES = [{"m": 1, "n": 1, "k": 1}, {"m": 3, "n": 33, "k": 5}, {"m": 16, "n": 16, "k": 32}, {"m": 5, "n": 7, "k": 2}]


def test_vector_values_follow_the_target():
    shape = {"m": 16, "n": 16, "k": 32}
    # The plain loop nest (naive) is a point of every target's space: the layer's baseline.
    assert MATMUL.space(get_target("cortex-m55"), shape).param("vector").values == ("c", "mve", "dsp", "naive")
    assert MATMUL.space(get_target("cortex-m4"), shape).param("vector").values == ("c", "dsp", "naive")
    host = get_target("host")
    detected = tuple(path for path in ("avx2", "avx512", "avxvnni", "avx512vnni") if host.has_vector(path))
    assert MATMUL.space(host, shape).param("vector").values == ("c", *detected, "naive")


PACKED_ONLY = {"avxvnni", "avx512vnni"}  # VPDPBUSD's offset of A lives in the packed column term


@pytest.mark.parametrize("target_name", ["cortex-m55", "host"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_legal_matmul_points_fit_the_shape(target_name, shape):
    target = get_target(target_name)
    space = MATMUL.space(target, shape)
    assert len(space) > 0
    compilers = {c.name for c in target.compilers}
    for config in space:
        assert config["tile_m"] <= shape["m"] or config["tile_m"] == 1
        assert config["unroll_k"] <= shape["k"] or config["unroll_k"] == 1
        assert config["compiler"] in compilers
        if config["vector"] == "mve" and config["layout"] == "rowmajor":
            assert config["tile_n"] % target.vector_unit("mve").lanes_for("int32") == 0
        if config["vector"] == "mve" and config["layout"] == "packed":
            # Helium's packed stream: the sums of the quads done stay in Q registers (tile_m per
            # quad; blocks of 8+ columns store each pair of quads before the next, so only the
            # pair's first), plus the quad's A vectors and two for the stream.
            quads = -(-config["tile_n"] // 4)
            live = 1 if config["tile_n"] >= 8 else quads - 1
            assert config["tile_m"] * live + config["tile_m"] + 2 <= target.vector_unit("mve").registers
        if config["vector"] in PACKED_ONLY:
            assert config["layout"] == "packed"


@pytest.mark.parametrize("target_name", ["cortex-m55", "host"])
def test_one_by_one_matmul_space_is_tiny(target_name):
    space = MATMUL.space(get_target(target_name), {"m": 1, "n": 1, "k": 1})
    # Only vector x layout x compiler x opt remain free: every tile and unroll is pinned to
    # its smallest (whole vectors of int32 lanes for row-major MVE and AVX: 4, 8 or 16); the
    # plain loop (naive) takes the first layout only.
    layouts = len(space.param("layout").values)
    free = (sum(1 if vector in PACKED_ONLY or vector == "naive" else layouts for vector in space.param("vector").values)
            * len(space.param("compiler").values) * len(space.param("opt").values))
    assert len(space) == free
    for c in space:
        widths = {"mve": 4, "avx2": 8, "avx512": 16}
        narrowest = widths.get(c["vector"], 1) if c["layout"] == "rowmajor" else 1
        assert (c["tile_m"], c["tile_n"], c["unroll_k"]) == (1, narrowest, 1)
