"""bench/ranker.py (docs/search-priors.md, "Ranking by compiled code"): its strategies are told the
run's budget, as every replay's are, and its ranked runs are tuner/recorded's replay loop
with one more stop rule: at the plain run's best."""
from edgetune.tuner import recorded
from edgetune.tuner.recorded import load_recorded, replay, replay_strategy

from bench_scripts import BENCH, load_bench

SPACES = BENCH / "spaces"


def _bench():
    return load_bench("ranker")


def test_every_strategy_of_the_bench_is_told_the_runs_budget(monkeypatch):
    told = []
    made = recorded.make_strategy

    def spy(*args, budget=None, **options):
        told.append(budget)
        return made(*args, budget=budget, **options)

    monkeypatch.setattr(recorded, "make_strategy", spy)
    everything = [load_recorded(p) for p in sorted(SPACES.glob("*.json.gz"))]
    fir = next(s for s in everything if s.kernel == "fir_q15")
    row = _bench().measure(fir, everything, "transfer", seeds=2, pool=4, cap=3.0, keep=None)
    assert told == [row["budget"]] * 4  # per seed: the plain run and the ranked run's inner strategy


def test_a_ranked_run_stops_at_the_first_value_reaching_the_plain_best():
    bench = _bench()
    fir = load_recorded(SPACES / "fir_q15-cortex-m55-t32b64.json.gz")
    best = replay(fir, "random", 40, seed=0).best
    for seed in range(1, 6):
        run = bench.replay_search(fir, replay_strategy(fir, "random", 40, seed), 120, stop_at=best)
        reached = [n for n, value in enumerate(run.trace) if value is not None and value <= best]
        assert reached == [len(run.trace) - 1] or (not reached and len(run.trace) == 120)
        assert run.compiles == len(run.trace)  # a plain search compiles what it runs
