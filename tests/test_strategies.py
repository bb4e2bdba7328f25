"""The conformance suite every strategy in STRATEGIES passes, plus checks of what each one
is for. Objective functions here are synthetic, so thousands of evaluations take seconds."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.tuner import (STRATEGIES, Constraint, Outcome, PriorTrials, Space, Trial, canonical_strategy,
                            check_strategy, choice, deprecation_note, make_strategy, powers_of_two)
from edgetune.tuner.strategies import Bandit, DifferentialEvolution, GeneticAlgorithm, LocalSearch, ModelGuided, TransferLearning

NAMES = sorted(STRATEGIES)
OBJECTIVE = "time"


def tile_space(constraints=()) -> Space:
    # 6 * 6 * 4 * 3 * 2 = 864 points: ordered powers of two, an ordered int, two unordered choices.
    return Space([powers_of_two("bx", 1, 32), powers_of_two("by", 1, 32), choice("unroll", [1, 2, 3, 4]),
                  choice("opt", ["O2", "O3", "Os"]), choice("vec", [True, False])], constraints)


def sparse_space() -> Space:
    """A constraint leaving under 5% of the Cartesian product legal."""
    space = tile_space([Constraint("bx * by must be 128", lambda c: c["bx"] * c["by"] == 128, reads=("bx", "by")),
                        Constraint("unroll must divide by, and be > 1", lambda c: c["by"] % c["unroll"] == 0 < c["unroll"] - 1,
                                   reads=("by", "unroll")),
                        Constraint("no Os", lambda c: c["opt"] != "Os", reads=("opt",))])
    assert 0 < len(space) < 0.05 * space.cartesian_size
    return space


def cost(config) -> float:
    """A smooth bowl with a failure region: best at bx=8, by=16, unroll=4, O3, vec."""
    c = config.as_dict()
    value = (np.log2(c["bx"]) - 3) ** 2 + (np.log2(c["by"]) - 4) ** 2 + (c["unroll"] - 4) ** 2
    value += {"O2": 0.5, "O3": 0.0, "Os": 2.0}[c["opt"]] + (0 if c["vec"] else 1.0)
    return 100.0 + 10.0 * value


def evaluate(config) -> Trial:
    if config["bx"] == 32 and config["by"] == 32:
        return Trial(config, Outcome.COMPILE_ERROR, error="too many registers")
    return Trial(config, Outcome.OK, {OBJECTIVE: cost(config), "code_bytes": 100})


def prior_for(space: Space) -> tuple[PriorTrials, ...]:
    """Another workload of the same kernel: a shifted, scaled bowl."""
    rng = np.random.default_rng(99)
    legal = space.legal_indices()
    configs = [space.config_at(int(i)) for i in rng.choice(legal, size=min(40, len(legal) // 2), replace=False)]
    trials = tuple(Trial(c, Outcome.OK, {OBJECTIVE: 3.0 * cost(c) + 7}) for c in configs)
    return (PriorTrials("other-shape", trials),)


def build(name: str, space: Space, seed: int):
    return make_strategy(name, space, np.random.default_rng(seed), OBJECTIVE, prior=prior_for(space))


def run(strategy, budget: int, batch: int = 1) -> list:
    """The tuning loop in miniature: ask, evaluate, tell, until the budget or exhaustion."""
    proposed = []
    while len(proposed) < budget:
        configs = strategy.ask(min(batch, budget - len(proposed)))
        if not configs:
            break
        proposed.extend(configs)
        strategy.tell([evaluate(c) for c in configs])
    return proposed


# --- conformance: every strategy --------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("space_maker", [tile_space, sparse_space], ids=["dense", "sparse"])
def test_proposals_are_legal_and_never_repeat(name, space_maker):
    space = space_maker()
    proposed = run(build(name, space, 1), budget=120, batch=3)
    assert len(proposed) == min(120, len(space))
    assert all(space.is_legal(c) for c in proposed)
    assert len(set(proposed)) == len(proposed)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_proposals(name):
    space = tile_space()
    first = run(build(name, space, 7), budget=60, batch=2)
    again = run(build(name, space, 7), budget=60, batch=2)
    assert first == again


@pytest.mark.parametrize("name", [n for n in NAMES if n != "exhaustive"])
def test_other_seed_other_proposals(name):
    space = tile_space()
    assert run(build(name, space, 7), budget=30) != run(build(name, space, 8), budget=30)


@pytest.mark.parametrize("name", NAMES)
def test_budget_is_respected(name):
    strategy = build(name, tile_space(), 3)
    assert len(strategy.ask(5)) == 5
    assert len(strategy.ask(0)) == 0
    assert len(run(strategy, budget=17, batch=4)) == 17


@pytest.mark.parametrize("name", NAMES)
def test_exhausts_the_sparse_space_then_returns_nothing(name):
    space = sparse_space()
    strategy = build(name, space, 5)
    proposed = run(strategy, budget=10 * len(space), batch=4)
    assert sorted(space.index_of(c) for c in proposed) == [int(i) for i in space.legal_indices()]
    assert strategy.ask(3) == []


@pytest.mark.parametrize("name", NAMES)
def test_told_configurations_are_never_proposed(name):
    # What an earlier run stored (successes and failures alike) is not measured again.
    space = sparse_space()
    stored = list(space)[::3]
    strategy = build(name, space, 2)
    strategy.tell([evaluate(c) for c in stored] + [Trial(list(space)[1], Outcome.CRASH)])
    proposed = run(strategy, budget=len(space))
    assert not set(proposed) & (set(stored) | {list(space)[1]})
    assert len(proposed) == len(space) - len(stored) - 1


@pytest.mark.parametrize("name", NAMES)
def test_all_failures_do_not_stop_the_search(name):
    space = tile_space()
    strategy = build(name, space, 4)
    seen = []
    for _ in range(10):
        configs = strategy.ask(3)
        seen.extend(configs)
        strategy.tell([Trial(c, Outcome.CRASH) for c in configs])
    assert len(set(seen)) == 30


# --- what the learning strategies are for ---------------------------------------------------
def best_after(name: str, space: Space, budget: int, seed: int) -> float:
    strategy = build(name, space, seed)
    run(strategy, budget)
    return strategy.best_value


@pytest.mark.parametrize("name", ["genetic", "annealing", "local", "gradient", "transfer", "bandit",
                                  "differential"])
def test_learning_strategies_beat_random_on_a_smooth_space(name):
    # Medians over seeds, so one lucky random run cannot decide it; the margin is the
    # comparison itself, with no hand-picked threshold.
    space = tile_space()
    seeds = range(7)
    ours = np.median([best_after(name, space, 60, s) for s in seeds])
    random = np.median([best_after("random", space, 60, s) for s in seeds])
    assert ours < random


def asked_trace(strategy, budget: int) -> list:
    """What the strategy proposes, batch by batch, told each batch's results."""
    trace = []
    while len(trace) < budget:
        batch = strategy.ask(min(4, budget - len(trace)))
        if not batch:
            break
        trace.extend(c.key() for c in batch)
        strategy.tell([evaluate(c) for c in batch])
    return trace


def test_the_old_name_model_is_transfer_whose_trace_without_priors_is_the_cost_models():
    # Why the two names were folded (issue 30): without priors `transfer` is the cost model,
    # proposal for proposal; with priors only `transfer` learns from them.
    space = tile_space()
    assert STRATEGIES.get("model") is None and check_strategy("model") is TransferLearning
    assert canonical_strategy("model") == "transfer" and canonical_strategy("annealing") == "annealing"
    assert "deprecated" in deprecation_note("model") and "--strategy transfer" in deprecation_note("model")
    assert deprecation_note("transfer") == ""
    cold = asked_trace(ModelGuided(space, np.random.default_rng(5), OBJECTIVE), 40)
    bare = asked_trace(make_strategy("model", space, np.random.default_rng(5), OBJECTIVE), 40)
    assert bare == cold and len(cold) == 40
    warm = asked_trace(make_strategy("model", space, np.random.default_rng(5), OBJECTIVE, prior=prior_for(space)), 40)
    assert warm != cold


def test_transfer_starts_from_the_prior_best_region():
    space = tile_space()
    warm = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=prior_for(space))
    cold = ModelGuided(space, np.random.default_rng(0), OBJECTIVE)
    assert warm.prior_size == 40
    first_warm = np.mean([cost(c) for c in warm.ask(8)])
    first_cold = np.mean([cost(c) for c in cold.ask(8)])
    assert first_warm < first_cold


def test_transfer_drops_prior_points_outside_the_space():
    space = tile_space()
    narrow = Space([powers_of_two("bx", 1, 4), powers_of_two("by", 1, 32), choice("unroll", [1, 2, 3, 4]),
                    choice("opt", ["O2", "O3", "Os"]), choice("vec", [True, False])])
    prior = prior_for(space)
    inside = sum(1 for t in prior[0].trials if t.config["bx"] <= 4)
    strategy = TransferLearning(narrow, np.random.default_rng(0), OBJECTIVE, prior=prior)
    assert strategy.prior_size == inside < 40


def test_local_search_climbs_to_the_optimum():
    space = tile_space()
    strategy = LocalSearch(space, np.random.default_rng(3), OBJECTIVE)
    run(strategy, budget=300)
    assert strategy.best_value == min(cost(c) for c in space)


def test_genetic_children_come_from_the_best_parents():
    space = tile_space()
    strategy = GeneticAlgorithm(space, np.random.default_rng(0), OBJECTIVE, population=8)
    run(strategy, budget=16)
    parents = {i for i, _ in strategy._ranked_results()[:8]}
    children = [space.index_of(c) for c in strategy.ask(20)]
    # Each child is within reach of a parent: the mean distance to the nearest parent is
    # smaller than that of uniformly random points.
    def nearest_parent(i):
        d = space.distances(space.digits(i))
        return min(d[space.legal_position(p)] for p in parents)
    random_points = np.random.default_rng(1).choice(space.legal_indices(), size=20, replace=False)
    assert np.mean([nearest_parent(i) for i in children]) < np.mean([nearest_parent(int(i)) for i in random_points])


def test_bandit_credits_the_arm_that_finds_new_bests():
    space = tile_space()
    bandit = Bandit(space, np.random.default_rng(0), OBJECTIVE)
    run(bandit, budget=40)
    assert len(bandit._history) == 40
    credited = {arm for arm, improved in bandit._history if improved}
    assert credited  # the first result is always a new best
    run(bandit, budget=60)
    assert len(bandit._history) == 50  # a sliding window of recent credits


def test_make_strategy_passes_prior_only_to_transfer():
    space = tile_space()
    assert build("transfer", space, 0).prior_size == 40
    with pytest.raises(TypeError):
        STRATEGIES["genetic"](space, np.random.default_rng(0), OBJECTIVE, prior=prior_for(space))


# --- neighbourhoods live on the space ---------------------------------------------------------
def test_neighbours_step_one_value_of_one_parameter():
    space = tile_space()
    centre = space.make({"bx": 8, "by": 1, "unroll": 2, "opt": "O3", "vec": True})
    got = {space.config_at(i).key() for i in space.neighbours(space.index_of(centre))}
    want = set()
    for change in [{"bx": 4}, {"bx": 16}, {"by": 2}, {"unroll": 1}, {"unroll": 3}, {"opt": "O2"}, {"opt": "Os"},
                   {"vec": False}]:
        want.add(space.make({**centre.as_dict(), **change}).key())
    assert got == want


def test_neighbours_jump_over_illegal_points_in_sparse_spaces():
    space = sparse_space()
    for index in space.legal_indices()[:50]:
        for n in space.neighbours(int(index)):
            assert space.is_legal_index(n)
            diff = [a != b for a, b in zip(space.digits(int(index)), space.digits(n))]
            assert sum(diff) == 1
    # Connected enough to walk: most legal points have a neighbour.
    assert np.mean([bool(space.neighbours(int(i))) for i in space.legal_indices()]) > 0.9


def test_differential_evolution_children_replace_their_target_only_when_not_worse():
    space = tile_space()
    strategy = DifferentialEvolution(space, np.random.default_rng(0), OBJECTIVE, population=6)
    run(strategy, budget=6)  # the random first generation
    assert len(strategy._members) == 6 and not strategy._pending
    for _ in range(30):
        before = dict(zip(range(6), zip(strategy._members, strategy._values)))
        (child,) = strategy.ask(1)
        index = space.index_of(child)
        slot = strategy._pending[index]
        trial = evaluate(child)
        strategy.tell([trial])
        value = trial.value(OBJECTIVE)
        improved = value is not None and value <= before[slot][1]
        assert strategy._members[slot] == (index if improved else before[slot][0])
        # Every other slot is untouched: a child competes with its own target only.
        assert all(strategy._members[s] == before[s][0] for s in range(6) if s != slot)
    assert max(strategy._values) <= max(v for _, v in before.values())


def test_differential_evolution_mutants_follow_the_difference_on_ordered_axes():
    space = tile_space()
    strategy = DifferentialEvolution(space, np.random.default_rng(0), OBJECTIVE, weight=0.5, crossover=1.0)
    target, a, b, c = (0, 0, 0, 0, 0), (1, 1, 1, 0, 0), (5, 3, 3, 1, 1), (1, 3, 1, 1, 0)
    trial = strategy._trial(target, a, b, c)
    # bx: 1 + 0.5 * (5 - 1); by: no difference; unroll: 1 + 0.5 * 2; opt: b == c, so a's value.
    assert trial[:4] == [3.0, 1.0, 2.0, 0.0]
    assert trial[4] in (0.0, 1.0)  # vec is unordered: a's value or b's, never in between


# --- a small budget tries the best point's untried categorical switches ----------------------
def path_space() -> Space:
    """Tiles (ordered), a kernel's path and a compiler (unordered); the `pixels` path needs a
    tile of at least 4, as a Helium pixel-tiled path needs whole vectors."""
    return Space([powers_of_two("tile", 1, 64), choice("unroll", [1, 2, 4]),
                  choice("path", ["plain", "vector", "pixels", "naive"]), choice("compiler", ["gcc", "clang"])],
                 [Constraint("pixels needs tile >= 4", lambda c: c["path"] != "pixels" or c["tile"] >= 4,
                             reads=("path", "tile"))])


def path_trial(config) -> Trial:
    c = config.as_dict()
    value = {"plain": 1000.0, "vector": 200.0, "pixels": 120.0, "naive": 900.0}[c["path"]]
    value *= (1 + 0.1 * abs(np.log2(c["tile"]) - 4)) * (1 + 0.05 * c["unroll"]) * (1.0 if c["compiler"] == "clang" else 1.3)
    return Trial(config, Outcome.OK, {OBJECTIVE: value})


def told_without_pixels(strategy) -> None:
    """Eight trials, none on the `pixels` path; the best: tile 16, unroll 1, vector, clang."""
    space = strategy.space
    for tile, unroll, path, compiler in [(16, 1, "vector", "clang"), (2, 4, "plain", "gcc"), (64, 2, "naive", "clang"),
                                         (1, 1, "vector", "gcc"), (8, 2, "plain", "clang"), (32, 4, "vector", "gcc"),
                                         (4, 1, "naive", "gcc"), (2, 2, "vector", "clang")]:
        strategy.tell([path_trial(space.make(dict(tile=tile, unroll=unroll, path=path, compiler=compiler)))])


def test_a_switch_is_the_fresh_point_nearest_the_best_with_an_untried_combination_of_categories():
    strategy = TransferLearning(path_space(), np.random.default_rng(0), OBJECTIVE, budget=32)
    assert strategy.switches
    told_without_pixels(strategy)
    space = strategy.space
    switched = {tuple(sorted(space.config_at(int(space.legal_indices()[p])).as_dict().items()))
                for p in strategy._switch_points()}
    # The best (16, 1, vector, clang) with one category changed: plain and naive with clang
    # were tried (8/2/plain/clang, 64/2/naive/clang), vector with gcc too; pixels never.
    assert switched == {tuple(sorted(dict(tile=16, unroll=1, path="pixels", compiler="clang").items()))}
    strategy.tell([path_trial(space.make(dict(tile=16, unroll=1, path="pixels", compiler="clang")))])
    # Now the best is on pixels: its untried switches are the other paths and gcc next to it.
    switched = [space.config_at(int(space.legal_indices()[p])).as_dict() for p in strategy._switch_points()]
    assert sorted((c["path"], c["compiler"]) for c in switched) == [("pixels", "gcc")]
    assert all((c["tile"], c["unroll"]) == (16, 1) for c in switched)


def test_a_small_budget_measures_an_untried_path_next_to_the_best_in_its_first_plan():
    strategy = TransferLearning(path_space(), np.random.default_rng(3), OBJECTIVE, budget=32)
    told_without_pixels(strategy)
    first_plan = [c.as_dict() for c in strategy.ask(2)]
    assert dict(tile=16, unroll=1, path="pixels", compiler="clang") in first_plan
    # A run without a budget hint (a large one) leaves the choice to the cost model alone.
    assert not TransferLearning(path_space(), np.random.default_rng(3), OBJECTIVE).switches
    assert not TransferLearning(path_space(), np.random.default_rng(3), OBJECTIVE, budget=200).switches


@pytest.mark.parametrize("space_maker", [tile_space, sparse_space, path_space], ids=["dense", "sparse", "paths"])
def test_a_small_budgets_transfer_proposes_legal_fresh_points_the_same_for_one_seed(space_maker):
    def trace(seed):
        strategy = TransferLearning(space_maker(), np.random.default_rng(seed), OBJECTIVE, budget=40,
                                    prior=prior_for(space_maker()) if space_maker is not path_space else ())
        proposed = []
        while len(proposed) < 40 and (configs := strategy.ask(min(3, 40 - len(proposed)))):
            assert all(strategy.space.is_legal(c) for c in configs)
            proposed.extend(configs)
            strategy.tell([(path_trial if space_maker is path_space else evaluate)(c) for c in configs])
        return [c.key() for c in proposed]

    first = trace(4)
    assert len(first) == min(40, len(space_maker())) and len(set(first)) == len(first)
    assert trace(4) == first
