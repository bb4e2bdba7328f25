"""Priors that check themselves (issue 30 goal 3): a prior that ranks this space's own trials
worse than chance is left out, so an adversarial prior (the true ranking inverted) cannot
drag a search below what it finds without priors; a faithful one keeps helping. Synthetic
spaces, replayed with the methodology's score (edgetune.tuner.scoring)."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.tuner import Config, Constraint, Outcome, PriorTrials, Space, Trial, choice, powers_of_two
from edgetune.tuner.recorded import RecordedSpace, timed_replay
from edgetune.tuner.scoring import baseline, score
from edgetune.tuner.strategies import TransferLearning, transfer
from edgetune.tuner.strategies.transfer import map_prior
from edgetune.tuner.strategies.prior_trust import rank_agreement, ranks

OBJECTIVE = "time"


def bowl_space() -> Space:
    return Space([powers_of_two("bx", 1, 32), powers_of_two("by", 1, 32), choice("unroll", [1, 2, 3, 4]),
                  choice("opt", ["O2", "O3", "Os"])])


def bowl(config) -> float:
    c = config.as_dict()
    return 100.0 + 3 * (np.log2(c["bx"]) - 3) ** 2 + 2 * (np.log2(c["by"]) - 4) ** 2 + (c["unroll"] - 4) ** 2 + (
        {"O2": 0.5, "O3": 0.0, "Os": 2.0}[c["opt"]])


def recorded_bowl() -> RecordedSpace:
    space = bowl_space()
    trials = {int(i): Trial(space.config_at(int(i)), Outcome.OK, {OBJECTIVE: bowl(space.config_at(int(i)))})
              for i in space.legal_indices()}
    return RecordedSpace("bowl", "bowl", "here", (), OBJECTIVE, space, trials)


def prior_of(space: Space, value) -> tuple[PriorTrials, ...]:
    """Every point of the space, measured elsewhere as `value(config)` says."""
    return (PriorTrials("elsewhere", tuple(Trial(c, Outcome.OK, {OBJECTIVE: value(c)}) for c in space)),)


def mean_score(recorded: RecordedSpace, prior, seeds: int = 8, **options) -> float:
    reference = baseline(recorded.values(), recorded.failures)
    scores = []
    for seed in range(seeds):
        search = TransferLearning(recorded.space, np.random.default_rng(seed), OBJECTIVE, prior=prior,
                                  budget=reference.budget, **options)
        trace = [t.value(OBJECTIVE) for t, _ in timed_replay(recorded, search, reference.budget)]
        scores.append(score(trace, reference))
    return float(np.mean(scores))


def test_rank_agreement_is_spearman_with_failures_last():
    assert ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [2.5, 0.0, 2.5, 1.0]
    measured = np.array([1.0, 2.0, 3.0, np.nan])
    assert rank_agreement(np.array([0.0, 1.0, 2.0, 3.0]), measured) == 1.0
    assert rank_agreement(np.array([3.0, 2.0, 1.0, 0.0]), measured) == -1.0
    assert rank_agreement(np.zeros(4), measured) == 0.0  # a constant prior says nothing


@pytest.mark.slow  # ~13 s of CPU: searches over seeds with and without the check; the faithful case stays
def test_an_inverted_prior_is_dropped_and_does_not_hurt():
    recorded = recorded_bowl()
    inverted = prior_of(recorded.space, lambda c: 1000.0 - bowl(c))
    without = mean_score(recorded, ())
    checked = mean_score(recorded, inverted)
    unchecked = mean_score(recorded, inverted, check_priors=False)
    assert unchecked < without - 0.1  # the adversary does hurt a search that trusts it ...
    assert checked >= without - 0.05  # ... and not one that checks it


def test_a_faithful_prior_is_kept_and_still_helps():
    recorded = recorded_bowl()
    faithful = prior_of(recorded.space, lambda c: 2 * bowl(c))
    assert mean_score(recorded, faithful) > mean_score(recorded, ()) + 0.1


def test_the_check_drops_an_inverted_prior_after_a_few_trials():
    recorded = recorded_bowl()
    search = TransferLearning(recorded.space, np.random.default_rng(0), OBJECTIVE,
                              prior=prior_of(recorded.space, lambda c: 1000.0 - bowl(c)), budget=40)
    timed_replay(recorded, search, 8)
    assert search.prior_size > 0 and search._usable_prior is None


def test_checked_transfer_is_deterministic_for_a_seed():
    recorded = recorded_bowl()
    inverted = prior_of(recorded.space, lambda c: 1000.0 - bowl(c))

    def configs(seed: int) -> list:
        search = TransferLearning(recorded.space, np.random.default_rng(seed), OBJECTIVE, prior=inverted, budget=30)
        return [t.config for t, _ in timed_replay(recorded, search, 30)]

    assert configs(5) == configs(5)
    assert configs(5) != configs(6)


def trials_of(rows: list[dict]) -> tuple[PriorTrials, ...]:
    return (PriorTrials("elsewhere", tuple(Trial(Config(tuple(r.items())), Outcome.OK, {OBJECTIVE: float(r["bx"])})
                                           for r in rows)),)


def test_a_prior_parameter_this_space_lacks_is_left_out_only_where_the_prior_never_varied_it():
    space = Space([choice("bx", [1, 2, 3, 4])])
    fixed = trials_of([{"bx": v, "alg": "a"} for v in (1, 2, 3, 4)])
    varied = trials_of([{"bx": v, "alg": alg} for v in (1, 2) for alg in ("a", "b")])
    assert len(map_prior(space, OBJECTIVE, fixed, 100)[1]) == 4
    assert len(map_prior(space, OBJECTIVE, varied, 100)[1]) == 0  # "alg" mattered there: nothing maps


def test_a_parameter_this_space_fixes_fills_in_for_a_prior_without_it():
    fixed_here = Space([choice("bx", [1, 2, 3, 4]), choice("mode", ["x", "y"])],
                       [Constraint("only x", lambda c: c["mode"] == "x")])
    free_here = Space([choice("bx", [1, 2, 3, 4]), choice("mode", ["x", "y"])])
    prior = trials_of([{"bx": v} for v in (1, 2, 3)])
    assert len(map_prior(fixed_here, OBJECTIVE, prior, 100)[1]) == 3
    assert len(map_prior(free_here, OBJECTIVE, prior, 100)[1]) == 0  # which mode it ran is unknown


def test_small_budgets_plan_a_few_proposals_at_a_time_with_few_random_ones():
    space = bowl_space()
    small = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, budget=20)
    large = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, budget=500)
    old = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, budget=20, small_budget_design=False)
    assert (small.batch, small.epsilon) == (transfer.SMALL_BATCH, transfer.SMALL_EPSILON)
    assert (large.batch, large.epsilon) == (old.batch, old.epsilon) == (8, 0.2)


def test_one_move_is_one_parameter_by_one_step_or_to_another_unordered_value():
    space = bowl_space()  # bx, by: ordered powers of two; unroll: ordered numbers; opt: unordered
    at = {"bx": 8, "by": 16, "unroll": 4, "opt": "O3"}

    def digits(**change):
        return space.digits(space.index_of({**at, **change}))

    here = digits()
    assert transfer.one_move_apart(space, here, digits(bx=16))  # one step
    assert transfer.one_move_apart(space, here, digits(opt="Os"))  # unordered: any other value
    assert not transfer.one_move_apart(space, here, digits(bx=32))  # two steps
    assert not transfer.one_move_apart(space, here, digits(bx=16, opt="O2"))  # two parameters
    assert not transfer.one_move_apart(space, here, here)


def test_the_first_plan_on_a_prior_tries_its_guesses_not_one_guess_and_its_neighbours():
    space = bowl_space()
    index = lambda **c: space.index_of({"bx": 8, "by": 16, "unroll": 4, "opt": "O3", **c})  # noqa: E731
    a, a_o2, a_bx, b, b_unroll, c = (index(), index(opt="O2"), index(bx=16), index(bx=1, by=1),
                                     index(bx=1, by=1, unroll=3), index(by=2, unroll=1))
    assert transfer.spread_out(space, [a, a_o2, a_bx, b, b_unroll, c], 3) == [a, b, c]
    assert transfer.spread_out(space, [a, a_o2, a_bx, b], 3) == [a, b, a_o2]  # then the waiting, in order

    # In a search: the prior's best are the bowl's bottom and its neighbours; the first plan
    # (8 proposals at this budget; none random here) holds no two neighbours, all among the
    # prior's best 24 (ties included).
    prior = prior_of(space, bowl)
    values = sorted(bowl(space.config_at(int(i))) for i in space.legal_indices())
    plans = {}
    for spread in (True, False):
        search = TransferLearning(space, np.random.default_rng(0), OBJECTIVE, prior=prior, budget=500,
                                  spread_first_plan=spread, epsilon=0.0)
        plans[spread] = [space.index_of(config.as_dict()) for config in search.ask(8)]
    pairs = lambda plan: [(p, q) for k, p in enumerate(plan) for q in plan[k + 1:]]  # noqa: E731
    assert not any(transfer.one_move_apart(space, space.digits(p), space.digits(q)) for p, q in pairs(plans[True]))
    assert all(bowl(space.config_at(i)) <= values[3 * 8 - 1] for i in plans[True])
    assert any(transfer.one_move_apart(space, space.digits(p), space.digits(q)) for p, q in pairs(plans[False]))
