"""Recorded spaces (ours and Kernel Tuner's cache files), `edgetune replay` and
`edgetune record`, and the session's strategy plumbing (prior trials, time budget, patience)."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune import __version__
from edgetune.cli import main
from edgetune.session import TuneRequest, prior_trials, tune, workload_of
from edgetune.tuner import STRATEGIES, Config, Outcome, Trial, TuningDatabase, Workload
from edgetune.tuner.recorded import RecordedSpaceError, load_recorded, replay

REPO = Path(__file__).resolve().parents[1]
KT_DATA = REPO / "tests" / "data" / "kernel_tuner"  # Kernel Tuner's own test caches (tests/data/README.md)


def cli(*args):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def kt_cache(tmp_path, entries: list, gz: bool = False) -> Path:
    """A small Kernel Tuner cache file: 3 x 4 product, only the given entries present."""
    data = {"device_name": "Test GPU", "kernel_name": "toy", "tune_params_keys": ["bx", "alg"],
            "tune_params": {"bx": [32, 64, 128], "alg": ["a", "b", True, 1]}, "objective": "time",
            "cache": {f"{bx},{alg}": {"bx": bx, "alg": alg, "time": t} for (bx, alg), t in entries}}
    path = tmp_path / ("toy.json.gz" if gz else "toy.json")
    text = json.dumps(data).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


# A list, not a dict: (64, True) and (64, 1) are equal as dict keys.
TOY = [((32, "a"), 3.0), ((64, "a"), 2.0), ((128, "a"), "CompilationFailedConfig"), ((64, True), 1.5),
       ((64, 1), 4.0), ((128, "b"), "RuntimeFailedConfig"), ((32, True), "InvalidConfig")]


# --- reading recorded spaces ------------------------------------------------------------------
@pytest.mark.parametrize("gz", [False, True])
def test_kernel_tuner_cache_legality_is_presence(tmp_path, gz):
    recorded = load_recorded(kt_cache(tmp_path, TOY, gz))
    assert recorded.space.cartesian_size == 12
    assert len(recorded.space) == len(TOY) == 7
    assert recorded.objective == "time" and recorded.kernel == "toy" and recorded.target == "Test GPU"
    assert not recorded.space.is_legal(recorded.space.make({"bx": 32, "alg": "b"}))
    # True and 1 are different values of `alg` (Kernel Tuner spaces mix them).
    assert recorded.trial(recorded.space.make({"bx": 64, "alg": True})).value("time") == 1.5
    assert recorded.trial(recorded.space.make({"bx": 64, "alg": 1})).value("time") == 4.0
    outcomes = {t.config.key(): t.outcome for t in recorded.trials.values() if t.outcome.failed}
    assert outcomes == {"alg=a,bx=128": Outcome.COMPILE_ERROR, "alg=b,bx=128": Outcome.RUNTIME_ERROR,
                        "alg=True,bx=32": Outcome.INVALID}
    assert recorded.failures == 3 and sorted(recorded.values()) == [1.5, 2.0, 3.0, 4.0]


def test_kernel_tuners_own_test_caches_load():
    paths = sorted(KT_DATA.glob("*.json"))
    assert len(paths) == 4
    for path in paths:
        recorded = load_recorded(path)
        assert len(recorded.space) == len(json.loads(path.read_text())["cache"])


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_replay_stays_inside_the_recording(tmp_path, name):
    recorded = load_recorded(kt_cache(tmp_path, TOY))
    run = replay(recorded, name, budget=20, seed=3)
    assert len(run.trace) == 7  # the whole recorded space, then the strategy runs dry
    assert sorted(v for v in run.trace if v is not None) == [1.5, 2.0, 3.0, 4.0]
    assert sum(v is None for v in run.trace) == 3
    assert run.best == 1.5 and run.best_config == {"bx": 64, "alg": True}


def test_our_format_round_trips_through_record_and_replay(matmul, m55, tmp_path):
    out = tmp_path / "space.json.gz"
    code, text = cli("record", "matmul_s8", "--target", "cortex-m55", "--shape", "m=1,n=1,k=1",
                     "--db", str(tmp_path / "t.db"), "--out", str(out), "--json")
    assert code == 0, text
    summary = json.loads(text)
    # The kernel's parameters plus buffer placement, which stays at its default while the
    # objective (instructions) cannot see it: the legal space is the kernel's own.
    space = matmul.tuning_space(m55, {"m": 1, "n": 1, "k": 1})
    size = len(matmul.space(m55, {"m": 1, "n": 1, "k": 1}))  # the whole legal space of this tiny shape
    assert summary["trials"] == summary["new_trials"] == size
    document = json.loads(gzip.decompress(out.read_bytes()))
    assert document["format"] == "edgetune-recorded-space" and document["objective"] == "instructions"
    assert document["shape"] == {"m": 1, "n": 1, "k": 1} and len(document["entries"]) == size
    # Provenance that says the same on any machine: the database by its file name, no folder.
    assert document["provenance"]["database"] == "t.db"
    assert document["provenance"]["tool"] == f"edgetune {__version__}"
    assert document["provenance"]["workload"] == workload_of(matmul, m55, {"m": 1, "n": 1, "k": 1}).key()
    recorded = load_recorded(out)
    db = TuningDatabase(tmp_path / "t.db")
    stored = {t.config.key(): t.value("instructions") for t in db.trials(workload_of(matmul, m55, {"m": 1, "n": 1, "k": 1}))}
    assert {t.config.key(): t.value("instructions") for t in recorded.trials.values()} == stored
    assert [p.name for p in recorded.space.params] == list(space.names)
    # Each measured configuration carries the features of its compiled code.
    ok = [e for e in document["entries"] if e["outcome"] == "ok"]
    assert all(e["features"]["code_bytes"] > 0 and e["features"]["instructions"] > 0 for e in ok)
    assert len(recorded.features) == len(ok)
    # Recording again measures nothing new (resumable through the database).
    code, text = cli("record", "matmul_s8", "--target", "cortex-m55", "--shape", "m=1,n=1,k=1",
                     "--db", str(tmp_path / "t.db"), "--out", str(out), "--json")
    assert code == 0 and json.loads(text)["new_trials"] == 0
    code, text = cli("replay", str(out), "--strategy", "transfer", "--budget", str(size), "--json")
    assert code == 0 and json.loads(text)["repeats"][0]["best"] == min(stored.values())


def test_committed_bench_spaces_load():
    files = sorted((REPO / "bench" / "spaces").glob("*.json.gz"))
    assert files
    for path in files:
        recorded = load_recorded(path)
        assert recorded.target in ("cortex-m55", "cortex-m4") and recorded.objective == "instructions"
        assert len(recorded.space) == len(recorded.trials) > 100
        # Every successful entry has its code's features (bench/ranker.py learns from them).
        ok = [i for i, t in recorded.trials.items() if not t.outcome.failed]
        assert set(ok) <= set(recorded.features), path.name
        provenance = json.loads(gzip.decompress(path.read_bytes()))["provenance"]
        assert "/" not in provenance["database"] and provenance["tool"].startswith("edgetune "), path.name
    kernels = {(load_recorded(p).kernel, load_recorded(p).target) for p in files}
    assert {("conv2d_s8", "cortex-m55"), ("conv2d_s8", "cortex-m4"), ("dwconv2d_s8", "cortex-m55"),
            ("dwconv2d_s8", "cortex-m4"), ("fir_q15", "cortex-m55"), ("matmul_s8", "cortex-m55")} <= kernels


def test_a_replay_with_priors_is_the_same_wherever_the_files_lie(tmp_path):
    # The prior's name seeds the subset a transfer search learns from: not the file's path.
    import shutil

    from edgetune.tuner.recorded import as_prior

    names = ("matmul_s8-cortex-m55-m16n16k32.json.gz", "matmul_s8-cortex-m55-m4n24k48.json.gz")
    for name in names:
        shutil.copy(REPO / "bench" / "spaces" / name, tmp_path / name)
    runs = []
    for folder in (REPO / "bench" / "spaces", tmp_path):
        scored, other = (load_recorded(folder / name) for name in names)
        prior = [as_prior(other)]
        assert prior[0].source == "matmul_s8/cortex-m55/m=4,n=24,k=48"
        assert len(other.trials) > 700  # more than an 8-trial run learns from: a subset is drawn
        runs.append([list(replay(scored, "transfer", 8, seed, prior).trace) for seed in range(2)])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("mutate, culprit", [
    (lambda d: d.pop("tune_params"), "neither"),
    (lambda d: d["cache"]["32,a"].__setitem__("time", None), "cache['32,a']"),
    (lambda d: d["cache"]["32,a"].pop("bx"), "cache['32,a']"),
    (lambda d: d["cache"]["32,a"].__setitem__("bx", 48), "48"),
    (lambda d: d.__setitem__("tune_params_keys", ["bx", "nope"]), "'nope'"),
])
def test_bad_kernel_tuner_files_are_named(tmp_path, mutate, culprit):
    path = kt_cache(tmp_path, TOY)
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))
    with pytest.raises(RecordedSpaceError) as info:
        load_recorded(path)
    assert str(path) in str(info.value) and culprit in str(info.value)


def test_bad_own_format_is_named(tmp_path):
    path = tmp_path / "ours.json"
    path.write_text(json.dumps({"format": "edgetune-recorded-space", "version": 1, "objective": "instructions",
                                "shape": {}, "parameters": [{"name": "a", "values": [1, 2]}],
                                "entries": [{"config": {"a": 1}, "outcome": "exploded"}]}))
    with pytest.raises(RecordedSpaceError, match=r"entries\[0\]: outcome: unknown 'exploded'"):
        load_recorded(path)


# --- the replay command ---------------------------------------------------------------------
def test_replay_json_shape_and_reproducibility(tmp_path):
    path = str(kt_cache(tmp_path, TOY))
    code, text = cli("replay", path, "--strategy", "genetic", "--budget", "5", "--seed", "10", "--repeats", "3",
                     "--json")
    assert code == 0, text
    data = json.loads(text)
    assert [r["seed"] for r in data["repeats"]] == [10, 11, 12]
    recorded = load_recorded(path)
    for run in data["repeats"]:
        assert len(run["trace"]) == 5
        ok = [v for v in run["trace"] if v is not None]
        assert run["best"] == (min(ok) if ok else None)
        assert all(v is None or v in recorded.values() for v in run["trace"])
    again = json.loads(cli("replay", path, "--strategy", "genetic", "--budget", "5", "--seed", "10", "--repeats",
                           "3", "--json")[1])
    assert without_timing(again) == without_timing(data)


def test_replay_with_the_old_name_model_runs_transfer_and_says_so(tmp_path):
    path = str(kt_cache(tmp_path, TOY))
    args = ["--budget", "5", "--seed", "3", "--json"]
    old = CliRunner().invoke(main, ["replay", path, "--strategy", "model", *args])
    new = CliRunner().invoke(main, ["replay", path, "--strategy", "transfer", *args])
    assert old.exit_code == new.exit_code == 0, old.output
    assert old.stderr.strip() == ("edgetune: strategy 'model' is deprecated: it is 'transfer' (the same proposals "
                                  "when no trials of the kernel on other workloads are stored); use --strategy transfer")
    assert new.stderr == ""
    assert without_timing(json.loads(old.stdout)) == without_timing(json.loads(new.stdout))
    assert json.loads(old.stdout)["strategy"] == "transfer"


def without_timing(result: dict) -> dict:
    """A replay's JSON less the strategy's wall time, the one part that differs run to run."""
    runs = [{**{k: v for k, v in run.items() if k != "strategy_ms_per_proposal"},
             "trials": [{k: v for k, v in t.items() if k != "strategy_ms"} for t in run["trials"]]}
            for run in result["repeats"]]
    return {**result, "repeats": runs}


def test_replay_json_carries_each_trial_the_objective_and_the_version(tmp_path):
    from edgetune import __version__
    path = str(kt_cache(tmp_path, TOY))
    code, text = cli("replay", path, "--strategy", "random", "--budget", "4", "--json")
    assert code == 0, text
    data = json.loads(text)
    recorded = load_recorded(path)
    assert data["edgetune"] == __version__ and data["objective"] == recorded.objective
    run = data["repeats"][0]
    assert [t["value"] for t in run["trials"]] == run["trace"]
    for trial in run["trials"]:  # each configuration is the recording's, and its value the recorded one
        # compared as JSON, so True and 1 (both values of one toy parameter) stay apart
        found = [t for t in recorded.trials.values() if json.dumps(t.config.as_dict()) == json.dumps(trial["config"])]
        assert len(found) == 1 and found[0].value(recorded.objective) == trial["value"], trial
        assert trial["strategy_ms"] >= 0
    assert run["strategy_ms_per_proposal"] >= 0
    assert run["best_config"] in [t["config"] for t in run["trials"] if t["value"] == run["best"]]


def two_value_space(tmp_path) -> Path:
    """An edgetune recording whose entries hold two values that rank the points oppositely."""
    entries = [{"config": {"a": a}, "outcome": "ok", "values": {"instructions": 10 + a, "code_bytes": 100 - a}}
               for a in range(6)]
    path = tmp_path / "two.json"
    path.write_text(json.dumps({"format": "edgetune-recorded-space", "version": 1, "kernel": "k", "kernel_version": 1,
                                "target": "cortex-m55", "shape": {}, "objective": "instructions",
                                "parameters": [{"name": "a", "values": list(range(6))}], "entries": entries}))
    return path


def test_replay_objective_picks_another_recorded_value(tmp_path):
    path = str(two_value_space(tmp_path))
    for objective, optimum in (("", 10), ("instructions", 10), ("code_bytes", 95)):
        args = ["replay", path, "--strategy", "exhaustive", "--budget", "6", "--json"]
        code, text = cli(*args, *(["--objective", objective] if objective else []))
        assert code == 0, text
        data = json.loads(text)
        assert data["optimum"] == optimum and data["repeats"][0]["best"] == optimum
        assert data["objective"] == (objective or "instructions")


def test_replay_objective_not_recorded_is_one_line_naming_it(tmp_path):
    result = CliRunner().invoke(main, ["replay", str(two_value_space(tmp_path)), "--objective", "energy_uj"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "energy_uj" in lines[0] and "code_bytes" in lines[0]


def test_a_space_is_parsed_once_per_process_until_its_file_changes(tmp_path):
    path = two_value_space(tmp_path)
    first = load_recorded(path)
    assert load_recorded(path) is first
    text = path.read_text().replace('"instructions": 10,', '"instructions": 9,')
    path.write_text(text)
    os.utime(path, ns=(1, 1))  # a new mtime even on a file system with coarse timestamps
    changed = load_recorded(path)
    assert changed is not first and changed.values().min() == 9


@pytest.mark.smoke
def test_replay_of_a_kernel_tuner_test_cache():
    code, text = cli("replay", str(KT_DATA / "strategies_test_cache_file.json"), "--strategy", "bandit",
                     "--budget", "15", "--json")
    assert code == 0
    run = json.loads(text)["repeats"][0]
    assert len(run["trace"]) == 15 and run["best"] == json.loads(text)["optimum"]


@pytest.mark.parametrize("args, culprit", [
    (["replay", "/no/such/file.json"], "/no/such/file.json"),
    (["replay", str(KT_DATA / "README.md")], "README.md"),
    (["replay", str(KT_DATA / "test_cache_file.json"), "--strategy", "psychic"], "psychic"),
])
def test_replay_errors_are_one_line_exit_2(args, culprit):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0]


# --- the session: every strategy, prior trials, time budget, patience ------------------------
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_tune_runs_with_every_strategy(name, tmp_path):
    code, text = cli("tune", "matmul_s8", "--target", "cortex-m55", "--shape", "m=1,n=1,k=1", "--budget", "3",
                     "--jobs", "2", "--strategy", name, "--db", str(tmp_path / "t.db"), "--json")
    assert code == 0, text
    data = json.loads(text)
    assert data["trials"] == 3 and data["best"]["instructions"] > 0 and data["stopped"] == "budget"


def test_prior_trials_are_the_same_kernels_other_workloads(tmp_path):
    db = TuningDatabase(tmp_path / "t.db")
    here = Workload("matmul_s8", 1, "cortex-m55", (("m", 4), ("n", 4), ("k", 4)))
    shape = Workload("matmul_s8", 1, "cortex-m55", (("m", 8), ("n", 8), ("k", 8)))
    target = Workload("matmul_s8", 1, "host", (("m", 4), ("n", 4), ("k", 4)))
    other_kernel = Workload("conv", 1, "cortex-m55", (("m", 4),))
    old_version = Workload("matmul_s8", 0, "cortex-m55", (("m", 2), ("n", 2), ("k", 2)))
    for n, workload in enumerate([here, shape, target, other_kernel, old_version]):
        db.record(workload, Trial(Config((("tile_m", n),)), Outcome.OK, {"instructions": 100 + n}), "random", 0)
    prior = prior_trials(db, here)
    assert sorted(p.source for p in prior) == sorted([shape.key(), target.key()])
    assert all(len(p.trials) == 1 for p in prior)


def test_patience_stops_a_run_without_progress(matmul, m55, tmp_path):
    db = TuningDatabase(tmp_path / "t.db")
    shape = {"m": 1, "n": 1, "k": 1}
    summary = tune(TuneRequest(matmul, m55, shape, "random", budget=12, jobs=1, seed=0, patience=1), db)
    trials = db.trials(workload_of(matmul, m55, shape))
    values = [t.value("instructions") for t in trials]
    # It ran until the first evaluation that did not improve on the best before it.
    first_miss = next(i for i in range(1, len(values)) if values[i] >= min(values[:i]))
    assert summary.stopped == "patience" and len(trials) == first_miss + 1 < 12


def test_time_budget_stops_the_run(matmul, m55, tmp_path):
    db = TuningDatabase(tmp_path / "t.db")
    summary = tune(TuneRequest(matmul, m55, {"m": 1, "n": 1, "k": 1}, "random", budget=12, jobs=1, seed=0,
                               time_budget=1e-9), db)
    assert summary.stopped == "time" and summary.new_trials == 0


def test_transfer_in_the_session_learns_from_another_shape(matmul, m55, tmp_path):
    db = TuningDatabase(tmp_path / "t.db")
    tune(TuneRequest(matmul, m55, {"m": 1, "n": 1, "k": 1}, "exhaustive", budget=12, jobs=2), db)
    summary = tune(TuneRequest(matmul, m55, {"m": 2, "n": 4, "k": 2}, "transfer", budget=4, jobs=2), db)
    assert summary.trials == 4 and summary.best is not None
    assert {r.strategy for r in db.records(summary.workload)} == {"transfer"}


def test_tune_defaults_to_the_benchmarks_best_strategy(matmul, m55, tmp_path):
    from edgetune.tuner.strategies import DEFAULT_STRATEGY

    code, text = cli("tune", "matmul_s8", "--shape", "m=1,n=1,k=1", "--budget", "2", "--db", str(tmp_path / "t.db"),
                     "--json")
    assert code == 0, text
    db = TuningDatabase(tmp_path / "t.db")
    records = db.records(workload_of(matmul, m55, {"m": 1, "n": 1, "k": 1}))
    assert DEFAULT_STRATEGY in STRATEGIES and {r.strategy for r in records} == {DEFAULT_STRATEGY}
