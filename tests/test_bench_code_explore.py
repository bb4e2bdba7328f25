"""bench/code_explore.py (docs/search-priors.md, "Beside the default strategy"): per seed the
plain run is `transfer` as every replay runs it, the ranked run uses the same seed and stops
at the plain run's best, and extra compiles are the candidates ranked and never run."""
from pathlib import Path

import pytest

from edgetune.tuner.recorded import load_recorded, replay

from bench_scripts import BENCH, load_bench

SPACES = BENCH / "spaces"


@pytest.mark.slow  # two seeds of two replays each plus a ranker fit: ~15-35 s
def test_the_figures_compare_transfer_with_its_ranked_self_at_equal_best(monkeypatch):
    bench = load_bench("code_explore")
    everything = [load_recorded(p) for p in sorted(SPACES.glob("*.json.gz"))]
    # matmul_s8's ranker fits its other M55 shapes, so the code votes (and compiles) from the start.
    scored = next(s for s in everything if Path(s.path).name == "matmul_s8-cortex-m55-m4n24k48.json.gz")
    stops = []
    replay_trials = bench.replay_trials

    def spy(recorded, search, budget, stop_at=None):
        stops.append(stop_at)
        return replay_trials(recorded, search, budget, stop_at)

    monkeypatch.setattr(bench, "replay_trials", spy)
    row = bench.measure(scored, everything, seeds=2, shortlist=4, draws=8, cap=3.0)
    plain = [replay(scored, "transfer", row.budget, seed, bench.priors_for(scored, everything),
                    roles=bench.target_roles(scored.target)) for seed in range(2)]
    assert stops == [run.best for run in plain]
    assert row.plain == [bench.first_reaching(list(run.trace), run.best) for run in plain]
    assert all(1 <= n <= 3 * row.budget for n in row.ranked)
    assert all(extra >= 0 for extra in row.extra_compiles) and sum(row.extra_compiles) > 0
    assert row.saved == 1 - sum(row.ranked) / sum(row.plain)
    # A board's time is modelled from the recorded instructions of the trials each run made.
    assert row.plain_instructions == [sum(v or 0 for v in run.trace[:n]) for run, n in zip(plain, row.plain)]
    assert all(work > 0 for work in row.ranked_instructions)


def test_a_boards_time_is_the_overhead_per_trial_the_runs_at_its_clock_and_every_compile():
    bench = load_bench("code_explore")
    # 10 trials of 3 s, 3 runs of 32 M instructions in all at 32 MHz, 12 compiles of 0.5 s
    assert bench.board_seconds(10, 32e6, 12, 0.5, 3.0, 3, 32e6) == 10 * 3.0 + 3 * 1.0 + 12 * 0.5


def test_static_only_leaves_out_the_loop_structure_counts_and_nothing_else():
    bench = load_bench("code_explore")
    fir = load_recorded(next(SPACES.glob("fir_q15-*.json.gz")))
    index, feats = next(iter(fir.features.items()))
    static = {name: v for name, v in feats.items() if not name.startswith(("mac_loop", "copy_loop"))}
    assert len(static) < len(feats)  # the recording holds the loop-structure counts
    widened = bench.replace(fir, features={index: dict(static, mac_loops=1, mac_loop_mac=3, copy_loop_instructions=7)})
    assert bench.static_only(widened).features == {index: static}
    assert widened.features[index]["mac_loop_mac"] == 3  # the space it came from is unchanged
