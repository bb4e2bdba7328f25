"""The task scheduler (tuner/scheduler.py) on synthetic cost curves: who gets the next round
of trials, and what that does to a model's total against an even split."""
from __future__ import annotations

import math

import pytest

from edgetune.tuner.scheduler import (EvenSplit, GradientScheduler, SchedTask, SchedulerError, TaskHistory,
                                      backward_slope, make_scheduler, model_cost)

GREEDY = GradientScheduler(epsilon=0.0)


def histories(**curves):
    return {name: TaskHistory(tuple(values)) for name, values in curves.items()}


def simulate(scheduler, tasks, curves, rounds, exhausted_after=None):
    """Give `rounds` rounds; after its n-th round a task costs curves[id](n) (None: no success)."""
    state = {task.id: TaskHistory() for task in tasks}
    order = []
    for _ in range(rounds):
        chosen = scheduler.choose(tasks, state)
        if chosen is None:
            break
        order.append(chosen)
        n = state[chosen].rounds + 1
        spent = exhausted_after is not None and n >= exhausted_after.get(chosen, math.inf)
        state[chosen] = state[chosen].after(curves[chosen](n), exhausted=spent)
    return order, state


def test_the_improving_layer_that_is_40_percent_of_the_model_goes_first():
    tasks = [SchedTask("a"), SchedTask("b"), SchedTask("c"), SchedTask("d")]
    state = histories(a=[100, 80, 60], b=[30, 30, 30], c=[30, 30, 30], d=[30, 30, 30])
    assert 60 / model_cost(tasks, state) == pytest.approx(0.4)
    assert GREEDY.choose(tasks, state) == "a"
    gradients = GREEDY.gradients(tasks, state)
    assert gradients["a"] < gradients["b"] == gradients["c"] == gradients["d"] < 0


def test_a_stalled_layer_gives_way_to_an_improving_one_of_the_same_size():
    tasks = [SchedTask("stalled"), SchedTask("improving")]
    state = histories(stalled=[50, 50, 50, 50], improving=[90, 70, 60, 50])
    assert GREEDY.choose(tasks, state) == "improving"


def test_weights_matter_identical_curves_the_layer_that_occurs_more_often_wins():
    state = histories(once=[40, 35, 30], four_times=[40, 35, 30])
    tasks = [SchedTask("once", weight=1), SchedTask("four_times", weight=4)]
    assert GREEDY.choose(tasks, state) == "four_times"
    swapped = [SchedTask("once", weight=4), SchedTask("four_times", weight=1)]
    assert GREEDY.choose(swapped, state) == "once"


def test_warm_up_is_round_robin_in_task_order():
    tasks = [SchedTask(name, weight=w) for name, w in (("x", 1), ("y", 9), ("z", 3))]
    order, _ = simulate(GradientScheduler(seed=3), tasks, {t.id: (lambda n: 10.0) for t in tasks}, 3)
    assert order == ["x", "y", "z"]


def test_an_exhausted_task_gets_no_more_rounds():
    tasks = [SchedTask("big", weight=10), SchedTask("small")]
    curves = {"big": lambda n: 1000.0 / n, "small": lambda n: 5.0}
    order, state = simulate(GradientScheduler(seed=1), tasks, curves, 12, exhausted_after={"big": 2})
    assert order.count("big") == 2 and state["big"].exhausted
    assert order[:3] == ["big", "small", "big"] and order[3:] == ["small"] * 9


def test_when_every_task_is_exhausted_nothing_is_chosen():
    tasks = [SchedTask("a"), SchedTask("b")]
    state = {"a": TaskHistory((5.0,), exhausted=True), "b": TaskHistory((7.0,), exhausted=True)}
    assert GradientScheduler().choose(tasks, state) is None
    assert EvenSplit().choose(tasks, state) is None


def test_a_task_without_success_goes_first_then_is_given_up_after_its_patience():
    tasks = [SchedTask("broken", weight=1), SchedTask("fine", weight=100)]
    curves = {"broken": lambda n: None, "fine": lambda n: 100.0 / n}
    order, state = simulate(GradientScheduler(seed=0, patience=3), tasks, curves, 10)
    assert order[:4] == ["broken", "fine", "broken", "broken"]
    assert order[4:] == ["fine"] * 6
    assert state["broken"].current is None and model_cost(tasks, state) is None


def test_a_task_behind_its_baseline_gets_rounds_until_it_beats_it_or_its_patience_ends():
    # The FC autoencoder's case: a small layer (little to win by the gradient) whose best is
    # still slower than its plain loop gets rounds ahead of a big one that is improving.
    tasks = [SchedTask("big", weight=6), SchedTask("small", baseline=50.0)]
    catches_up = {"big": lambda n: 1000.0 / n, "small": lambda n: 80.0 if n < 3 else 40.0}
    order, state = simulate(GradientScheduler(epsilon=0.0, patience=3), tasks, catches_up, 8)
    assert order[:4] == ["big", "small", "small", "small"] and state["small"].current == 40.0
    assert order[4:] == ["big"] * 4  # caught up: back to the gradient
    never = {"big": lambda n: 1000.0 / n, "small": lambda n: 80.0}
    order, state = simulate(GradientScheduler(epsilon=0.0, patience=3), tasks, never, 10)
    assert order[:5] == ["big", "small", "small", "small", "small"] and order.count("small") == 4
    assert state["small"].current == 80.0 > tasks[1].baseline  # given up after 1 + patience rounds
    without = [SchedTask("big", weight=6), SchedTask("small")]
    order, _ = simulate(GradientScheduler(epsilon=0.0, patience=3), without, never, 8)
    assert order.count("small") == 1  # without the baseline the gradient never comes back to it


def test_a_late_first_success_brings_the_task_into_the_competition():
    tasks = [SchedTask("late"), SchedTask("other")]
    curves = {"late": lambda n: None if n < 2 else 500.0 / n, "other": lambda n: 10.0}
    order, state = simulate(GradientScheduler(epsilon=0.0), tasks, curves, 6)
    assert order[:3] == ["late", "other", "late"]
    assert state["late"].current is not None and order.count("late") >= 4  # by far the costliest


def test_similar_tasks_tell_a_slow_layer_how_far_it_may_fall():
    # Same cost, no slope yet, but b does a quarter of a's work: at the throughput (MACs per
    # unit of cost) the similar task ref reaches, b could cost far less, so b goes first.
    tasks = [SchedTask("a", group="conv", work=1000), SchedTask("b", group="conv", work=250),
             SchedTask("ref", group="conv", work=4000)]
    state = histories(a=[100, 100], b=[100, 100], ref=[100, 100])
    gradients = GREEDY.gradients(tasks, state)
    assert GREEDY.choose(tasks, state) == "b"
    assert gradients["b"] == pytest.approx(0.8 * (2 * 250 / 40 - 100))  # beta * C / V_best - g
    assert gradients["a"] == gradients["ref"] == pytest.approx(0.8 * -50)  # -g/t is the more optimistic
    # In a group of its own, b has only its own -g/t: all three tie, the first in order wins.
    alone = [SchedTask("a", group="conv", work=1000), SchedTask("b", group="dw", work=250),
             SchedTask("ref", group="conv", work=4000)]
    assert GREEDY.gradients(alone, state)["b"] == pytest.approx(0.8 * -50)
    assert GREEDY.choose(alone, state) == "a"


def test_the_same_seed_chooses_the_same_rounds_and_another_seed_may_not():
    tasks = [SchedTask(f"t{i}", weight=1 + i % 3) for i in range(5)]
    curves = {t.id: (lambda n, s=i: 100.0 * (1 + s) / math.sqrt(n)) for i, t in enumerate(tasks)}
    runs = {seed: simulate(GradientScheduler(seed=seed, epsilon=0.3), tasks, curves, 60)[0] for seed in (0, 0, 1, 2)}
    first, _ = simulate(GradientScheduler(seed=0, epsilon=0.3), tasks, curves, 60)
    assert runs[0] == first
    assert runs[1] != runs[0] or runs[2] != runs[0]


def test_the_gradient_split_beats_the_even_split_on_the_same_budget():
    # A model where one layer dominates and keeps improving, one is large but converges at
    # once, and three are small: the even split wastes rounds on the ones that cannot gain.
    tasks = [SchedTask("dominant", weight=2), SchedTask("flat"), SchedTask("s1"), SchedTask("s2"), SchedTask("s3")]
    curves = {"dominant": lambda n: 200.0 + 800.0 * math.exp(-n / 6), "flat": lambda n: 300.0,
              "s1": lambda n: 20.0 + 30.0 * math.exp(-n), "s2": lambda n: 25.0, "s3": lambda n: 15.0 + 5 / n}
    for rounds in (10, 20, 30):
        _, gradient = simulate(GradientScheduler(seed=0), tasks, curves, rounds)
        _, even = simulate(EvenSplit(), tasks, curves, rounds)
        assert model_cost(tasks, gradient) < model_cost(tasks, even)


def test_even_split_gives_the_live_task_with_fewest_rounds_the_next_one():
    tasks = [SchedTask("a", weight=100), SchedTask("b"), SchedTask("c")]
    order, _ = simulate(EvenSplit(), tasks, {t.id: (lambda n: 10.0) for t in tasks}, 7)
    assert order == ["a", "b", "c", "a", "b", "c", "a"]


def test_backward_slope_over_the_window():
    assert backward_slope([100, 90, 70, 40, 40], window=3) == pytest.approx((40 - 90) / 3)
    assert backward_slope([100, 80], window=3) == pytest.approx(-20)
    assert backward_slope([None, None, 60, 30], window=3) == pytest.approx(-30)
    assert backward_slope([50], window=3) == 0.0
    assert backward_slope([None], window=3) == 0.0


def test_model_cost_is_the_weighted_sum_and_none_while_a_task_lacks_a_result():
    tasks = [SchedTask("a", weight=3), SchedTask("b")]
    assert model_cost(tasks, histories(a=[10, 8], b=[5])) == 29
    assert model_cost(tasks, histories(a=[10])) is None


def test_scheduler_names():
    assert make_scheduler("gradient", seed=4).seed == 4
    assert isinstance(make_scheduler("even"), EvenSplit)
    with pytest.raises(SchedulerError, match="unknown scheduler 'fastest'.*gradient, even"):
        make_scheduler("fastest")


def test_task_ids_must_be_distinct_and_weights_positive():
    with pytest.raises(ValueError, match="repeat"):
        GradientScheduler().choose([SchedTask("a"), SchedTask("a")], {})
    with pytest.raises(ValueError, match="weight"):
        SchedTask("a", weight=0)
