"""What the issue-18 changes to the strategies are for: the cost model's space-filling
initial design, transfer's once-fitted prior, and the restarts of genetic, local and
annealing. Synthetic objectives, so each check takes milliseconds."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.tuner import Outcome, PriorTrials, Space, Trial, choice, powers_of_two
from edgetune.tuner.strategies import (GeneticAlgorithm, LocalSearch, ModelGuided, SimulatedAnnealing, TransferLearning,
                                       make_strategy)
from edgetune.tuner.strategies import transfer
from edgetune.tuner.strategies.annealing import UNKNOWN_BUDGET_DESIGN
from edgetune.tuner.strategies import model as model_strategy
from edgetune.tuner.strategies.model import forget_fits

OBJECTIVE = "time"


def line_space() -> Space:
    return Space([choice("a", list(range(100))), choice("fixed", [1])])


def bowl_space() -> Space:
    return Space([powers_of_two("bx", 1, 32), powers_of_two("by", 1, 32), choice("unroll", [1, 2, 3, 4]),
                  choice("opt", ["O2", "O3", "Os"])])


def bowl(config) -> float:
    c = config.as_dict()
    return 100.0 + (np.log2(c["bx"]) - 3) ** 2 + (np.log2(c["by"]) - 4) ** 2 + (c["unroll"] - 4) ** 2 + (
        {"O2": 0.5, "O3": 0.0, "Os": 2.0}[c["opt"]])


def tell_value(strategy, config, value: float) -> None:
    strategy.tell([Trial(config, Outcome.OK, {OBJECTIVE: value})])


def test_initial_design_counts_only_parameters_that_vary():
    # Two parameters, one of them with a single value: the floor of four, not 2 x 2 random points.
    assert ModelGuided(line_space(), np.random.default_rng(0), OBJECTIVE).initial == 4
    many = Space([choice(f"p{i}", [1, 2]) for i in range(14)] + [choice("one", [0])])
    assert ModelGuided(many, np.random.default_rng(0), OBJECTIVE).initial == 10


def test_initial_design_spreads_over_the_space():
    space = line_space()
    strategy = ModelGuided(space, np.random.default_rng(5), OBJECTIVE)
    first = strategy.ask(1)[0]
    tell_value(strategy, first, 1.0)
    second = strategy.ask(1)[0]
    # The whole space is the candidate sample, so the second point is the farthest one: an end.
    assert abs(second["a"] - first["a"]) == max(first["a"], 99 - first["a"])


def test_transfer_fits_the_prior_once_and_trains_online_on_its_own_trials():
    space = bowl_space()
    rng = np.random.default_rng(1)
    configs = [space.config_at(int(i)) for i in rng.choice(space.legal_indices(), 60, replace=False)]
    prior = (PriorTrials("other", tuple(Trial(c, Outcome.OK, {OBJECTIVE: 2 * bowl(c)}) for c in configs)),)
    strategy = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=prior)
    first = strategy.ask(4)
    # Before any own trial the proposals are the prior model's best-scored points.
    assert np.mean([bowl(c) for c in first]) < np.mean([bowl(c) for c in space])
    for config in first:
        tell_value(strategy, config, bowl(config))
    features, targets, _ = strategy._training_data()
    assert len(targets) == 4  # its own trials only, not the 60 prior ones
    assert features.shape[1] == len(space.params) + 1  # the prior score is one more feature


def test_genetic_starts_a_new_epoch_when_the_population_stagnates():
    space = bowl_space()
    strategy = GeneticAlgorithm(space, np.random.default_rng(0), OBJECTIVE, population=4, patience=6)
    told = 0
    while told < 30:
        config = strategy.ask(1)[0]
        tell_value(strategy, config, 50.0 if told == 0 else 60.0 + told)  # the first is never beaten
        told += 1
        if told == 7:
            # Six results without a new epoch best: only the best point survives the restart.
            assert strategy._epoch == {strategy.best_index: 50.0}
    assert len(strategy._epoch) < 30


def kicked_from_best(space, strategy, start) -> bool:
    differ = sum(a != b for a, b in zip(space.digits(strategy.best_index), space.digits(space.index_of(start))))
    return differ <= 2


def test_local_search_restarts_alternate_a_kick_of_the_best_with_a_random_point():
    space = bowl_space()
    strategy = LocalSearch(space, np.random.default_rng(2), OBJECTIVE)
    starts = []
    for _ in range(400):
        before = strategy._current
        configs = strategy.ask(1)
        if not configs:
            break
        if before is None or strategy._current is None:
            starts.append(configs[0])
        tell_value(strategy, configs[0], bowl(configs[0]))
        if len(starts) >= 2 and strategy._restarts == 2:
            assert kicked_from_best(space, strategy, starts[-1])
            return
    raise AssertionError("local search never restarted twice")


def test_annealing_restarts_after_patience_results_without_a_new_walk_best():
    space = bowl_space()
    strategy = SimulatedAnnealing(space, np.random.default_rng(0), OBJECTIVE, patience=5, jump=0.0, initial=1)
    config = strategy.ask(1)[0]
    tell_value(strategy, config, 1.0)
    for n in range(6):  # the walk's first result, then five without a new walk best
        config = strategy.ask(1)[0]
        tell_value(strategy, config, 10.0 + n)
    assert strategy._current is None and strategy.temperature == strategy.start_temperature
    restart = strategy.ask(1)[0]  # a restart: a kick of the best point
    assert kicked_from_best(space, strategy, restart)


def test_annealing_design_grows_with_the_budget():
    space = bowl_space()
    sizes = [SimulatedAnnealing(space, np.random.default_rng(0), OBJECTIVE, budget=b).initial for b in (6, 60, 200, 5000)]
    assert sizes == [3, 6, 20, 30]
    assert make_strategy("annealing", space, np.random.default_rng(0), OBJECTIVE, budget=200).initial == 20
    assert make_strategy("annealing", space, np.random.default_rng(0), OBJECTIVE).initial == UNKNOWN_BUDGET_DESIGN


def test_annealing_walks_from_the_best_design_point_over_fresh_neighbours():
    space = bowl_space()
    strategy = SimulatedAnnealing(space, np.random.default_rng(3), OBJECTIVE, budget=40, jump=0.0)
    design = strategy.ask(strategy.initial)
    assert len(design) == 4
    # Space-filling: the design's points are far apart (no two within one step of each other).
    assert all(space.index_of(b) not in space.neighbours(space.index_of(a)) for a in design for b in design if a != b)
    for config in design:
        tell_value(strategy, config, bowl(config))
    best = min(design, key=bowl)
    told = {space.index_of(c) for c in design}
    for step in range(60):
        current = strategy._current if step else space.index_of(best)
        unvisited = [n for n in space.neighbours(current) if n not in told] if current is not None else []
        config = strategy.ask(1)[0]
        index = space.index_of(config)
        assert index not in told  # never a configuration already evaluated
        if unvisited:
            assert index in unvisited  # a fresh neighbour of the current point while one is left
        told.add(index)
        tell_value(strategy, config, bowl(config))


def test_annealing_jumps_set_one_parameter_to_any_value():
    space = bowl_space()
    strategy = SimulatedAnnealing(space, np.random.default_rng(4), OBJECTIVE, jump=1.0, initial=1)
    first = strategy.ask(1)[0]
    tell_value(strategy, first, bowl(first))
    for _ in range(30):
        current = strategy._current
        config = strategy.ask(1)[0]
        if current is not None:
            # The target differs in one parameter; where it was taken, the nearest fresh point.
            differ = sum(a != b for a, b in zip(space.digits(current), space.digits(space.index_of(config))))
            assert 1 <= differ <= 2
        tell_value(strategy, config, bowl(config))


def bowl_prior(space, count: int, source: str = "other", seed: int = 1) -> tuple[PriorTrials, ...]:
    rng = np.random.default_rng(seed)
    configs = [space.config_at(int(i)) for i in rng.choice(space.legal_indices(), count, replace=False)]
    return (PriorTrials(source, tuple(Trial(c, Outcome.OK, {OBJECTIVE: 2 * bowl(c)}) for c in configs)),)


def test_transfer_fits_its_prior_on_first_use_and_shares_it_across_seeds(monkeypatch):
    space = bowl_space()
    prior = bowl_prior(space, 60)
    fits = []
    real = transfer.map_prior
    monkeypatch.setattr(transfer, "map_prior", lambda *args: fits.append(args) or real(*args))
    transfer._PRIOR_CACHE.clear()
    first = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=prior)
    assert fits == []  # nothing fitted until the search needs it
    first.ask(2)
    second = TransferLearning(space, np.random.default_rng(7), OBJECTIVE, prior=prior)
    second.ask(2)
    assert len(fits) == 1  # the second search, another seed, reused the first one's fit
    assert second._prior_score is first._prior_score
    assert not second._prior_score.flags.writeable  # shared, so nobody may change it


def test_transfer_prior_cache_misses_on_another_prior_set_or_space(monkeypatch):
    space = bowl_space()
    transfer._PRIOR_CACHE.clear()
    prior = bowl_prior(space, 60)
    base = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=prior)._prior_score
    # Equal content in new objects, other content, another space: each is mapped afresh;
    # equal rows asked about equal points are not fitted again (model.fitted_predictions).
    mapped = []
    real = transfer.map_prior
    monkeypatch.setattr(transfer, "map_prior", lambda *args: mapped.append(args) or real(*args))
    same_content = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=bowl_prior(space, 60))
    assert np.array_equal(same_content._prior_score, base)  # deterministic: the same data, the same score
    assert len(mapped) == 1
    other = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=bowl_prior(space, 60, seed=2))
    assert other._prior_score is not base and not np.array_equal(other._prior_score, base)
    more = prior + bowl_prior(space, 30, source="third")
    assert TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=more).prior_size == 90
    assert np.array_equal(TransferLearning(bowl_space(), np.random.default_rng(0), OBJECTIVE, prior=prior)._prior_score,
                          base)
    assert len(mapped) == 4


def test_transfer_prior_rows_follow_the_budget():
    space = bowl_space()  # 6 x 6 x 4 x 3 = 432 points
    prior = bowl_prior(space, 400, "a") + bowl_prior(space, 400, "b", seed=2)
    small = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=prior, budget=5)
    assert small.prior_size == transfer.PRIOR_MIN_ROWS  # 350 from each source, not all 800
    assert TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=prior, budget=12).prior_size == 800
    assert TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=prior).prior_size == 800


def test_transfer_is_deterministic_for_a_seed_and_its_prior_score_for_any_seed():
    space = bowl_space()
    prior = bowl_prior(space, 300)

    def proposals(seed: int) -> list:
        transfer._PRIOR_CACHE.clear()
        strategy = TransferLearning(space, np.random.default_rng(seed), OBJECTIVE, prior=prior, budget=30)
        out = []
        for _ in range(20):
            config = strategy.ask(1)[0]
            tell_value(strategy, config, bowl(config))
            out.append(config)
        return out, strategy._prior_score.copy()

    (a, score_a), (b, score_b), (c, score_c) = proposals(3), proposals(3), proposals(4)
    assert a == b and a != c
    assert np.array_equal(score_a, score_b) and np.array_equal(score_a, score_c)


def test_transfer_fits_large_priors_on_histograms(monkeypatch):
    space = bowl_space()
    configs = list(space) * 8  # 3,456 trials per source, two sources: above the histogram threshold
    prior = tuple(PriorTrials(name, tuple(Trial(c, Outcome.OK, {OBJECTIVE: 2 * bowl(c)}) for c in configs))
                  for name in ("one", "two"))
    used = []
    real = transfer.HistogramTrees.fit
    monkeypatch.setattr(transfer.HistogramTrees, "fit", lambda self, *a: used.append(len(a[1])) or real(self, *a))
    transfer._PRIOR_CACHE.clear()
    forget_fits()  # an earlier test may have fitted the same rows
    strategy = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=prior)
    first = strategy.ask(4)
    assert used == [2 * transfer.PRIOR_ROWS]  # each source gives at most PRIOR_ROWS
    assert min(bowl(c) for c in first) == min(bowl(c) for c in space)  # the prior's best is tried first


def test_a_fit_is_made_once_per_content(monkeypatch):
    forget_fits()
    fits = []
    real = model_strategy.BoostedTrees.fit
    monkeypatch.setattr(model_strategy.BoostedTrees, "fit", lambda self, *a: fits.append(a) or real(self, *a))
    rng = np.random.default_rng(3)
    features, targets, points = rng.integers(0, 4, (40, 3)).astype(float), rng.random(40), rng.random((9, 3))
    first = model_strategy.fitted_predictions(model_strategy.BoostedTrees, 5, features, targets, None, points)
    again = model_strategy.fitted_predictions(model_strategy.BoostedTrees, 5, features.copy(), targets.copy(),
                                              np.ones(40), points.copy())  # unit weights: the same fit
    assert again is first and len(fits) == 1 and not first.flags.writeable
    other_seed = model_strategy.fitted_predictions(model_strategy.BoostedTrees, 6, features, targets, None, points)
    other_rows = model_strategy.fitted_predictions(model_strategy.BoostedTrees, 5, features, targets[::-1].copy(),
                                                   None, points)
    assert len(fits) == 3 and other_seed is not first and not np.array_equal(other_rows, first)
    fresh = model_strategy.BoostedTrees(seed=5)
    fresh.fit(features, targets)
    assert np.array_equal(fresh.predict(points), first)  # what a fit of its own gives


def test_scipy_docstrings_are_left_as_they_are():
    array_api = pytest.importorskip("scipy._lib._array_api")
    if not hasattr(array_api, "xp_capabilities"):
        pytest.skip("this SciPy adds no array-API notes")

    def documented():
        """Add one.

        Returns
        -------
        int
        """

    before = documented.__doc__
    original = array_api.FunctionDoc
    array_api.FunctionDoc = model_strategy._DocstringAsItIs
    try:
        array_api.xp_capabilities(capabilities_table={})(documented)
    finally:
        array_api.FunctionDoc = original
    assert documented.__doc__ == before.lstrip(" \n")
