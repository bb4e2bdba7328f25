"""bench/models.py's model totals: tuned layers against plain C, weighted by occurrence."""
from types import SimpleNamespace

from bench_scripts import load_bench


def _bench():
    return load_bench("models")


def _layer(key: str, weight: int, macs: int, instructions: float | None, cycles: float | None):
    trial = SimpleNamespace(value=lambda unit: {"instructions": instructions, "cycles": cycles}[unit])
    return SimpleNamespace(workload=SimpleNamespace(key=lambda: key), weight=weight, macs=macs,
                           best=None if instructions is None else SimpleNamespace(trial=trial), value=instructions)


def _summary(layers, total):
    return SimpleNamespace(target="cortex-m55", objective="instructions", budget=6, layers=layers, total=total)


def test_totals_weight_each_layer_by_its_occurrences():
    bench = _bench()
    layers = [_layer("a", 4, 100, 10.0, 20.0), _layer("b", 1, 50, 30.0, 40.0)]
    plain = {"a": {"instructions": 100.0, "cycles": 90.0}, "b": {"instructions": 300.0, "cycles": 200.0}}
    runs = {"gradient": (None, 3.0), "even": (None, 2.0)}
    figures = bench.totals(_summary(layers, 70.0), _summary(layers, 80.0), plain, runs)
    assert figures["tuned_cycles"] == 4 * 20 + 40
    assert figures["plain"] == 4 * 100 + 300
    assert figures["plain_cycles"] == 4 * 90 + 200
    assert figures["macs"] == 4 * 100 + 50
    assert (figures["tuned"], figures["even"]) == (70.0, 80.0)


def test_a_layer_without_a_plain_run_leaves_the_plain_total_unknown():
    bench = _bench()
    layers = [_layer("a", 2, 100, 10.0, 20.0), _layer("b", 1, 50, None, None)]
    figures = bench.totals(_summary(layers, None), _summary(layers, None), {"a": {"instructions": 5.0}},
                           {"gradient": (None, 1.0), "even": (None, 1.0)})
    assert figures["plain"] is None and figures["tuned_cycles"] is None and figures["plain_cycles"] is None
