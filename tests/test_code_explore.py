"""`transfer` with its choices ranked by compiled code (edgetune.tuner.code_explore): the
model's plan is chosen by the sum of the model's and the code's ranks, each random proposal
is the best-scored of a few random points, the rest stay fresh, nothing changes when the
ranking has no say, a gate gives it a say only on evidence that it ranks this kernel (its fit
on the kernel's other spaces, or on this space's own trials), and a seed reproduces a run."""
from __future__ import annotations

import numpy as np
import pytest

from edgetune.tuner import Config, Outcome, Param, Space, Trial
from edgetune.tuner.code_explore import CodeRankedTransfer, KernelFit, rank_positions
from edgetune.tuner.strategies import make_strategy

SPACE = Space([Param("tile", (1, 2, 4, 8, 16)), Param("unroll", (1, 2, 4, 8)), Param("vector", ("c", "mve", "dsp"))])


def cost(config: Config) -> float:
    return 100.0 * (1 + (config["vector"] != "mve")) + 7 * abs(np.log2(config["tile"]) - 2) + config["unroll"]


def by_tile(config: Config) -> float:
    return float(config["tile"])


def run(search, evaluations: int) -> list[str]:
    keys = []
    for _ in range(evaluations):
        config = search.ask(1)[0]
        keys.append(config.key())
        search.tell([Trial(config, Outcome.OK, {"instructions": cost(config)})])
    return keys


def ranked(seed: int, score=by_tile, **options) -> CodeRankedTransfer:
    return CodeRankedTransfer(SPACE, np.random.default_rng(seed), "instructions", score=score, **options)


def test_the_plan_is_the_best_by_the_sum_of_the_model_and_code_ranks():
    search = ranked(0, gate=None)
    a, b, c, d = (SPACE.index_of({"tile": t, "unroll": 1, "vector": "c"}) for t in (16, 8, 1, 2))
    # model ranks a b c d; code ranks c (tile 1) d b a: sums a 0+3, b 1+2, c 2+0, d 3+1
    assert search._chosen([a, b, c, d], 2) == [c, a]  # c 2; a and b tie at 3, the model's order breaks it
    assert search._chosen([a, b, c, d], 1) == [c]
    assert search.scored == 4  # each candidate compiled and scored once
    search._chosen([a, b, c, d], 3)
    assert search.scored == 4


def test_a_point_without_a_score_ranks_last():
    assert list(rank_positions([2.0, np.inf, 1.0])) == [1.0, 2.0, 0.0]
    search = ranked(0, score=lambda c: None if c["tile"] == 1 else by_tile(c), gate=None)
    none, b, c = (SPACE.index_of({"tile": t, "unroll": 1, "vector": "c"}) for t in (1, 16, 8))
    # code ranks c b none: sums b 0+1, none 1+2, c 2+0 (scored as the best, none would tie b)
    assert search._chosen([b, none, c], 2) == [b, c]


def test_a_random_proposal_is_the_best_scored_of_its_draws_and_the_rest_stay_fresh():
    search = ranked(3, draws=4, gate=None)
    first = search._random_fresh()
    drawn = [first, *search._drawn]
    assert len(drawn) == 4 and len(set(drawn)) == 4
    assert SPACE.config_at(first)["tile"] == min(SPACE.config_at(i)["tile"] for i in drawn)
    kept = list(search._drawn)
    second = search._random_fresh()  # the three kept plus one new draw
    assert second in kept or second not in drawn
    assert SPACE.config_at(second)["tile"] <= min(SPACE.config_at(i)["tile"] for i in kept)
    assert first not in search._drawn and second not in search._drawn


@pytest.mark.slow  # ~30 s of CPU: two whole searches compared proposal by proposal
def test_with_no_say_for_the_ranking_it_is_transfer_proposal_for_proposal():
    plain = make_strategy("transfer", SPACE, np.random.default_rng(5), "instructions", budget=30)
    wrapped = ranked(5, shortlist=1, draws=1, budget=30, score=lambda c: 0.0)
    assert run(wrapped, 30) == run(plain, 30)


def test_a_seed_reproduces_the_run_and_the_ranking_changes_it():
    assert run(ranked(7), 25) == run(ranked(7), 25)
    plain = make_strategy("transfer", SPACE, np.random.default_rng(7), "instructions", budget=25)
    assert run(ranked(7, gate=None), 25) != run(plain, 25)


def test_every_proposal_is_legal_and_new_until_the_space_is_done():
    search = ranked(1)
    keys = run(search, len(SPACE.legal_indices()))
    assert len(set(keys)) == len(SPACE.legal_indices())
    assert search.ask(1) == []


@pytest.mark.parametrize("options", [{"shortlist": 0}, {"draws": 0}, {"screen": 0}])
def test_bad_sizes_are_refused(options):
    with pytest.raises(ValueError, match="at least 1"):
        ranked(0, **options)


def tell_all(search, configs) -> None:
    for config in configs:
        search.tell([Trial(config, Outcome.OK, {"instructions": cost(config)})])


def test_the_gate_opens_on_own_trials_the_ranking_ranks_and_stays_shut_otherwise():
    points = [SPACE.config_at(int(i)) for i in SPACE.legal_indices()[::5]]
    right = ranked(0, score=cost, gate=0.5, gate_trials=6)  # the code explains the measured cost
    wrong = ranked(0, score=lambda c: -cost(c), gate=0.5, gate_trials=6)  # ... ranks it backwards
    tell_all(right, points[:5])
    tell_all(wrong, points[:5])
    assert not right.ranking_on and not wrong.ranking_on  # five trials: too few to judge
    tell_all(right, points[5:6])
    tell_all(wrong, points[5:6])
    assert right.ranking_on and not wrong.ranking_on
    assert right.shortlist == 4 and wrong.shortlist == 1


def test_the_rankers_fit_on_the_kernels_other_spaces_opens_the_gate_from_the_first_plan():
    assert ranked(0, kernel_fit=KernelFit(0.9, 2)).designs_by_code
    assert not ranked(0, kernel_fit=KernelFit(0.75, 2)).ranking_on  # a fair fit is not enough
    assert not ranked(0, kernel_fit=KernelFit(0.95, 1)).ranking_on  # one space is one shape
    assert not ranked(0, kernel_fit=KernelFit(0.5, 3)).ranking_on and not ranked(0, kernel_fit=None).ranking_on
    assert ranked(0, gate=None).ranking_on  # no gate: always a say


def test_a_vote_on_the_kernels_fit_is_judged_again_by_the_own_trials():
    points = [SPACE.config_at(int(i)) for i in SPACE.legal_indices()[::5]]
    right = ranked(0, score=cost, gate=0.5, gate_trials=6, kernel_fit=KernelFit(0.85, 2))
    wrong = ranked(0, score=lambda c: -cost(c), gate=0.5, gate_trials=6, kernel_fit=KernelFit(0.85, 2))
    assert right.ranking_on and wrong.ranking_on  # the fit lets both vote from the start ...
    tell_all(right, points[:6])
    tell_all(wrong, points[:6])
    assert right.ranking_on and not wrong.ranking_on  # ... the own trials take the vote from the one they contradict
    assert not ranked(0, kernel_fit=KernelFit(0.95, 1)).ranking_on  # one shape is no such fit


def test_while_the_gate_is_shut_it_is_transfer_proposal_for_proposal():
    plain = make_strategy("transfer", SPACE, np.random.default_rng(4), "instructions", budget=14)
    gated = ranked(4, score=lambda c: -cost(c), budget=14)
    assert run(gated, 14) == run(plain, 14)
    assert not gated.ranking_on


def test_with_the_kernels_fit_every_other_design_point_is_the_codes_best_of_its_screen():
    search = ranked(0, score=cost, kernel_fit=KernelFit(0.9, 2), screen=20)
    assert search.initial == 4  # three parameters vary: a design of four points
    proposed = []
    for _ in range(search.initial):
        config = search.ask(1)[0]
        proposed.append(config)
        search.tell([Trial(config, Outcome.OK, {"instructions": cost(config)})])
    screen = [SPACE.config_at(i) for i in search._screen]
    assert len(screen) == len({c.key() for c in screen}) == 20
    assert search.scored >= 20  # the screen is compiled and scored once
    best_first = sorted(screen, key=cost)
    assert proposed[0] == best_first[0]
    # the second keeps the design's spread: far from the first, not the code's next best
    assert proposed[1] != next(c for c in best_first if c != proposed[0])
    assert proposed[2] == next(c for c in best_first if c not in proposed[:2])  # the best one still fresh


def test_the_screen_is_kept_in_proportion_to_a_known_budget():
    assert ranked(0).screen == 256
    assert ranked(0, budget=4).screen == 32  # eight compiles per evaluation of the budget
    assert ranked(0, budget=100, screen=40).screen == 40


def test_a_gate_opened_by_own_trials_alone_leaves_the_design_to_transfer():
    # The rank correlation on a few trials says the code orders the space, not that its top
    # is the space's top: the design stays spread, proposal for proposal.
    plain = make_strategy("transfer", SPACE, np.random.default_rng(6), "instructions", budget=30)
    gated = ranked(6, score=cost, gate=0.5, gate_trials=2, kernel_fit=None, budget=30)
    assert run(gated, 4) == run(plain, 4)
    assert gated.ranking_on and not gated.designs_by_code and gated._screen is None


def test_a_larger_budgets_screen_extends_the_smaller_ones_and_leaves_the_strategys_draws_alone():
    # A model's layer opens its search again each round with a larger budget: the points
    # screened (compiled) before stay in the screen, which grows.
    small = ranked(5, score=cost, kernel_fit=KernelFit(0.9, 2), budget=2)
    large = ranked(5, score=cost, kernel_fit=KernelFit(0.9, 2), budget=5)
    other = ranked(6, score=cost, kernel_fit=KernelFit(0.9, 2), budget=5)
    for search in (small, large, other):
        search._screened()
    assert (len(small._screen), len(large._screen)) == (16, 40)
    assert large._screen[:16] == small._screen
    assert other._screen != large._screen  # another seed, another screen
    # drawing the screen takes nothing from the strategy's own generator
    unscreened = ranked(5, score=cost, kernel_fit=KernelFit(0.9, 2), budget=2)
    assert small.rng.integers(1 << 30) == unscreened.rng.integers(1 << 30)


def test_screen_ahead_names_the_screen_a_later_round_draws_while_the_design_goes_on():
    # A model tune compiles it in the background while other layers' trials run
    # (edgetune.ahead): it must be the points the reopened search will ask for.
    first = ranked(5, score=cost, kernel_fit=KernelFit(0.9, 2), budget=2)
    run(first, 1)
    assert first._screen is not None and first.designing
    later = ranked(5, score=cost, kernel_fit=KernelFit(0.9, 2), budget=5)
    later._screened()
    assert first.screen_ahead(5) == later._screen and len(later._screen) == 40
    run(first, 12)  # the design is over, but a search opened again replays its design points
    eight = ranked(5, score=cost, kernel_fit=KernelFit(0.9, 2), budget=8)
    eight._screened()
    assert not first.designing and first.screen_ahead(8) == eight._screen and len(eight._screen) > 40  # all 60 legal
    # without the kernel's fit the design is transfer's own: nothing to compile ahead
    unfit = ranked(5, score=cost, kernel_fit=KernelFit(0.5, 2), budget=2)
    assert unfit.designing and unfit.screen_ahead(5) == []


def test_trials_in_flight_are_believed_at_their_scores_scaled_to_the_measured_values():
    search = ranked(0, score=lambda c: cost(c) / 4, gate=None)  # the score: a quarter of the cost
    assert search.believed([SPACE.config_at(0)]) == []  # nothing measured: nothing to scale by
    run(search, 12)
    asked = search.ask(2)
    believed = search.believed(asked)
    scored = [c for c in asked if SPACE.index_of(c) in search.scored_indices]
    assert scored  # the plan's points were scored to be chosen
    for config, trial in zip(asked, believed):
        assert trial.config == config and trial.outcome == Outcome.OK
        if config in scored:  # measured values are 4 times the score: so is the belief
            assert trial.value("instructions") == pytest.approx(cost(config))
        else:  # not compiled yet: the median of the results
            assert trial.value("instructions") == pytest.approx(np.median(list(search.results.values())))
    unscored = next(SPACE.config_at(int(i)) for i in SPACE.legal_indices() if int(i) not in search.scored_indices
                    and int(i) not in search.results)
    assert search.believed([unscored])[0].value("instructions") == pytest.approx(
        np.median(list(search.results.values())))
