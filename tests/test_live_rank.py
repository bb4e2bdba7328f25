"""`--strategy transfer+code` in live tuning (edgetune.live_rank): selectable in `tune` and
`model tune`, its gate's first evidence from the recorded spaces shipped with the package, a
candidate that does not compile ranked last and then a failed trial, a seed reproducing the
run, and with its gate shut the same proposals as `transfer`."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgetune import live_rank
from edgetune.codegen import get_kernel
from edgetune.model import load_model
from edgetune.model.session import LayerRanking, distinct_workloads, tune_model
from edgetune.session import LiveSearch, TuneRequest, tune
from edgetune.targets import get_target
from edgetune.tuner import Outcome, Space, TuningDatabase, choice
from edgetune.tuner.code_explore import GATE_KERNEL_RHO, MIN_SPACES, CodeRankedTransfer, KernelFit, rank_positions

ROOT = Path(__file__).resolve().parents[1]


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgetune.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))


def test_the_package_ships_the_recorded_spaces_the_benchmarks_read():
    # One copy: bench/spaces is a link to the package's folder.
    assert (ROOT / "bench" / "spaces").resolve() == live_rank.RANKING_SPACES.resolve()
    assert len(list(live_rank.RANKING_SPACES.glob("*.json.gz"))) >= 10
    assert all(space.features for space in live_rank.ranking_spaces())


def test_a_recorded_space_of_the_tuned_workload_is_left_out_of_the_gates_evidence():
    spaces = live_rank.ranking_spaces()
    mine = [s for s in spaces if live_rank.records_workload(s, "matmul_s8", "cortex-m55", {"m": 16, "n": 16, "k": 32})]
    assert [Path(s.path).name for s in mine] == ["matmul_s8-cortex-m55-m16n16k32.json.gz"]
    assert not [s for s in spaces if live_rank.records_workload(s, "matmul_s8", "cortex-m55", {"m": 16, "n": 16, "k": 16})]
    # the M55 and the M4 record m=4,n=24,k=48, each its own; the M7 none
    both = [s for s in spaces if live_rank.records_workload(s, "matmul_s8", "cortex-m4", {"m": 4, "n": 24, "k": 48})]
    assert [Path(s.path).name for s in both] == ["matmul_s8-cortex-m4-m4n24k48.json.gz"]
    shape = {"m": 4, "n": 24, "k": 48}
    assert not [s for s in spaces if live_rank.records_workload(s, "matmul_s8", "cortex-m7", shape)]
    # Left out, the tuned workload's own space is not its evidence: two M4 siblings remain.
    fit = live_rank.live_ranker("matmul_s8", "cortex-m4", {"m": 4, "n": 24, "k": 48}).kernel_fit
    assert fit.spaces == 2


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m55"])
def test_ds_cnns_convolutions_have_evidence_on_two_other_shapes(target):
    """Each of DS-CNN's convolution workloads is judged on two recorded shapes of its kernel
    other than its own (its depthwise layer's own space left out), enough for the code to vote
    from the first plan where the estimate ranks them at GATE_KERNEL_RHO or better."""
    model = load_model(ROOT / "tests" / "data" / "models" / "ds_cnn_kws.tflite")
    for lw in distinct_workloads(model.layers, get_target(target)):
        ranker = live_rank.live_ranker(lw.kernel.name, target, lw.shape)
        assert ranker.kernel_fit.spaces >= MIN_SPACES, lw.workload.key()
        assert ranker.kernel_fit.rho >= GATE_KERNEL_RHO, (lw.workload.key(), ranker.kernel_fit)
        assert ranker.left_out == ((f"dwconv2d_s8-{target}-h25w5c64k3.json.gz",) if lw.kernel.name == "dwconv2d_s8"
                                   else ())


def test_without_a_score_transfer_code_proposes_as_transfer_does():
    """The strategy as make_strategy builds it without a ranking (the conformance suite)."""
    from edgetune.tuner import make_strategy

    space = Space([choice("a", [1, 2, 3, 4]), choice("b", [1, 2, 3, 4, 5])])
    searches = [make_strategy(name, space, np.random.default_rng(3), "v", budget=12)
                for name in ("transfer", "transfer+code")]
    assert isinstance(searches[1], CodeRankedTransfer)
    for _ in range(6):
        asked = [s.ask(2) for s in searches]
        assert asked[0] == asked[1]
        for search in searches:
            search.tell([trial_of(c) for c in asked[0]])


def trial_of(config):
    from edgetune.tuner import Trial

    return Trial(config, Outcome.OK, values={"v": float(config["a"] * 7 + (config["b"] - 3) ** 2)})


def test_an_unscored_candidate_ranks_last_in_the_codes_vote():
    """A point with no score (it did not compile) takes the code's last rank: the model's
    favourite loses the plan to the next one, and a random slot takes a scored draw."""
    space = Space([choice("a", list(range(8))), choice("b", [0, 1])])
    broken = {c.key() for c in space if c["b"] == 1}
    search = CodeRankedTransfer(space, np.random.default_rng(0), "v", budget=16, gate=None,
                                score=lambda c: None if c.key() in broken else float(c["a"]))
    assert list(rank_positions([0.3, np.inf, 0.1])) == [1.0, 2.0, 0.0]
    index = {c.key(): space.index_of(c) for c in space}
    model_order = [index[space.make({"a": 0, "b": 1}).key()], *(index[space.make({"a": a, "b": 0}).key()]
                                                                for a in (3, 1, 2))]
    assert search._chosen(model_order, 1) == [index[space.make({"a": 1, "b": 0}).key()]]
    drawn = [search._random_fresh() for _ in range(4)]
    assert all(space.config_at(i).key() not in broken for i in drawn)


# --- live, on the emulated Cortex-M55 ----------------------------------------------------------------
BROKEN_KERNEL = """import edgetune as et
KERNEL = et.KernelDef(name="rankcopy", shape=("size",), source="k.c",
    args=[et.Output("y", "int8", "size"), et.Input("x", "int8", "size"), et.Scalar("n", "size")],
    params={'u': [1, 2, 3]}, reference=lambda shape, i: i['x'].copy())
"""
BROKEN_SOURCE = ("#if u == 2\nint broken = undeclared;\n#endif\n"
                 "void rankcopy(int8_t *y, const int8_t *x, int n) { for (int i = 0; i < n; i++) y[i] = x[i]; }\n")


@pytest.mark.qemu
def test_a_candidate_that_does_not_compile_has_no_score_and_is_a_failed_trial_when_run(tmp_path):
    folder = tmp_path / "rankcopy"
    folder.mkdir()
    (folder / "kernel.py").write_text(BROKEN_KERNEL)
    (folder / "k.c").write_text(BROKEN_SOURCE)
    from edgetune.api import register

    kernel, target = register(folder), get_target("cortex-m55")
    space = kernel.tuning_space(target, {"size": 16})
    ranking = live_rank.code_ranking(kernel, target, {"size": 16}, space, "rankcopy-test", 1)
    score = ranking["score"]
    scores = [(c["u"], score(c)) for c in space]
    assert all((value is None) == (u == 2) for u, value in scores), scores
    db = TuningDatabase(tmp_path / "t.db")
    summary = tune(TuneRequest(kernel, target, {"size": 16}, "transfer+code", len(space), 1, 0), db)
    failed = [t for t in db.trials(summary.workload) if t.config["u"] == 2]
    assert failed and all(t.outcome is Outcome.COMPILE_ERROR for t in failed)
    assert summary.best is not None and summary.best.trial.config["u"] != 2


@pytest.mark.qemu
@pytest.mark.slow  # a whole command, its ranker learnt in a process of its own; the library runs below
def test_tune_runs_transfer_code_from_the_command_line_and_stores_it_by_name(tmp_path):
    result = cli(tmp_path, "tune", "matmul_s8", "--target", "cortex-m55", "--shape", "m=4,n=8,k=16", "--budget", "4",
                 "--strategy", "transfer+code", "--db", str(tmp_path / "t.db"))
    assert result.returncode == 0, result.stderr
    db = TuningDatabase(tmp_path / "t.db")
    (workload,) = db.workloads()
    assert {r.strategy for r in db.proposals(workload)} == {"transfer+code"} and len(db.proposals(workload)) == 4
    # It says what the code ranking did: matmul_s8's recorded M55 spaces let it vote from the start.
    (line,) = [line for line in result.stdout.splitlines() if line.strip().startswith("code ranking:")]
    fit = re.search(r"matmul_s8's 3 recorded spaces on this target at (\d\.\d\d) \(>= 0\.8\)", line)
    assert fit and float(fit.group(1)) >= 0.8 and "voted from the first plan" in line
    compiled = int(line.rsplit(";", 1)[1].split()[0])
    assert compiled >= 4  # at least the four it ran


def test_transfer_code_is_refused_on_a_target_without_a_disassembler(tmp_path):
    result = cli(tmp_path, "tune", "matmul_s8", "--target", "host", "--shape", "m=4,n=8,k=16", "--budget", "2",
                 "--strategy", "transfer+code", "--db", str(tmp_path / "t.db"))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "--strategy transfer+code: target host names no disassembler" in line, result.stderr
    assert not (tmp_path / "t.db").exists()  # refused before the database is opened
    model = cli(tmp_path, "model", "tune", str(ROOT / "tests" / "data" / "models" / "fc_autoencoder_ad.tflite"),
                "--target", "host", "--strategy", "transfer+code", "--db", str(tmp_path / "m.db"))
    assert model.returncode == 2 and "target host names no disassembler" in model.stderr
    assert not (tmp_path / "m.db").exists()


def test_a_tune_summary_says_what_the_code_ranking_did():
    """The `code ranking:` line and the JSON object of `tune`, from a summary (the gate's
    three cases), without running anything."""
    from click.testing import CliRunner

    import click

    from edgetune.cli.summary import print_code_ranking, summary_json
    from edgetune.session import TuneSummary, Workload
    from edgetune.tuner.code_explore import CodeRankingUse

    workload = Workload("conv2d_s8", 4, "cortex-m55", (("h", 3),), "f")

    def line(use: CodeRankingUse) -> str:
        summary = TuneSummary(workload, "instructions", 8, 8, code_ranking=use)
        out = CliRunner().invoke(click.command()(lambda: print_code_ranking(summary)), [])
        return out.output.strip()

    assert line(CodeRankingUse(KernelFit(0.83, 2), True, True, 61)) == (
        "code ranking: the code estimate ranks conv2d_s8's 2 recorded spaces on this target at 0.83 (>= 0.8): "
        "the code voted from the first plan (design points from its screen), and keeps its vote while it "
        "ranks this workload's own trials at 0.9 or more (it does now); 61 candidates compiled and ranked")
    dropped = line(CodeRankingUse(KernelFit(0.83, 2), True, False, 8))
    assert "the code voted from the first plan" in dropped and "(not now)" in dropped
    below = line(CodeRankingUse(KernelFit(0.75, 2), False, False, 8))
    assert "at 0.75 (< 0.8)" in below and "own trials reaches 0.9 (not now)" in below
    one = line(CodeRankingUse(KernelFit(0.82, 1), False, False, 8))
    assert "1 recorded space on this target at 0.82 (one shape: it takes 2 to vote from the start)" in one
    assert line(CodeRankingUse(None, False, True, 12)).startswith(
        "code ranking: no other recorded space of conv2d_s8 on this target to judge it by: the code votes "
        "only while its ranking of this workload's own trials reaches 0.9 (it does now)")
    use = CodeRankingUse(KernelFit(0.75, 2), False, True, 8)
    data = summary_json(TuneSummary(workload, "instructions", 8, 8, code_ranking=use), "t.db")
    assert data["code_ranking"] == {"kernel_fit": {"rho": 0.75, "spaces": 2}, "voted_from_start": False,
                                    "voting_now": True, "compiled": 8}
    assert summary_json(TuneSummary(workload, "instructions", 8, 8), "t.db")["code_ranking"] is None


@pytest.mark.qemu
def test_model_tune_runs_transfer_code_on_a_layer(tmp_path):
    model = load_model(ROOT / "tests" / "data" / "models" / "ds_cnn_kws.tflite")
    depthwise = [layer for layer in model.layers if layer.kernel == "dwconv2d_s8"][:1]
    db = TuningDatabase(tmp_path / "t.db")
    summary = tune_model(depthwise, get_target("cortex-m7"), db, budget=3, strategy="transfer+code", baselines=False)
    assert summary.spent == 3
    (workload,) = db.workloads()
    asked = [r for r in db.proposals(workload) if r.asked]
    assert asked and {r.strategy for r in db.proposals(workload)} == {"transfer+code"}
    # What the code ranking did is kept per layer: one round, below the own-trials gate's
    # first judgement (GATE_TRIALS), with no recorded dwconv2d_s8 space of the M7 as evidence.
    (layer,) = summary.layers
    assert layer.code_ranking == LayerRanking(None, False, 1, 0, layer.code_ranking.compiled)
    plain = tune_model(depthwise, get_target("cortex-m7"), TuningDatabase(tmp_path / "p.db"), budget=1,
                       baselines=False)
    assert plain.layers[0].code_ranking is None  # `transfer` ranks no code


def test_model_tune_says_per_layer_what_the_code_ranking_did():
    """model tune's text lines and JSON objects, from a summary, without running anything."""
    from click.testing import CliRunner

    import click

    from edgetune.cli.model_tune import _summary_json, print_code_rankings
    from edgetune.model.session import LayerResult, ModelSummary
    from edgetune.session import Workload

    def layer(kernel: str, layers: tuple[int, ...], use: LayerRanking | None) -> LayerResult:
        return LayerResult(Workload(kernel, 4, "cortex-m55", (("h", 3),), "f"), layers, 10, 8, None, None,
                           code_ranking=use)

    summary = ModelSummary("cortex-m55", "instructions", "gradient", 16, 16, (
        layer("conv2d_s8", (0,), LayerRanking(KernelFit(0.83, 2), True, 2, 2, 61)),
        layer("dwconv2d_s8", (1, 3), LayerRanking(None, False, 3, 1, 12))))
    lines = CliRunner().invoke(click.command()(lambda: print_code_rankings(summary)), []).output.splitlines()
    assert lines[1] == ("    layers 0: the code estimate ranks conv2d_s8's 2 recorded spaces on this target at "
                        "0.83 (>= 0.8); the code voted after 2 of 2 rounds (from the first plan on); 61 candidates "
                        "compiled and ranked")
    assert lines[2] == ("    layers 1,3: no other recorded space of dwconv2d_s8 on this target to judge it by; "
                        "the code voted after 1 of 3 rounds; 12 candidates compiled and ranked")
    data = _summary_json(summary, (), "m.db")["workloads"]
    assert data[1]["code_ranking"] == {"kernel_fit": None, "voted_from_start": False, "rounds": 3,
                                       "rounds_voting": 1, "compiled": 12}
    plain = replace(summary, layers=(layer("conv2d_s8", (0,), None),))
    assert CliRunner().invoke(click.command()(lambda: print_code_rankings(plain)), []).output == ""
    assert _summary_json(plain, (), "m.db")["workloads"][0]["code_ranking"] is None


def live_proposals(tmp_path: Path, name: str, kernel: str, shape: str, strategy: str, budget: int, seed: int,
                   db_from: Path | None = None, target: str = "cortex-m55"):
    live_rank.forget_scores()
    path = tmp_path / f"{name}.db"
    if db_from is not None:
        shutil.copy(db_from, path)
    db = TuningDatabase(path)
    kernel = get_kernel(kernel)
    request = TuneRequest(kernel, get_target(target), kernel.parse_shape(shape), strategy, budget, 1, seed)
    with LiveSearch(request, db) as search:
        search.run(budget)
        return [r.trial.config for r in db.proposals(search.workload)], search.start.resumed.strategy


@pytest.mark.qemu
def test_a_seed_reproduces_a_live_transfer_code_run(tmp_path):
    """With trials of the kernel on another shape stored, `transfer` plans from its first
    proposal; the code estimate ranks matmul_s8's recorded M55 shapes at 0.98 or better
    (kernel_fit >= GATE_KERNEL_RHO), so the code votes from the first plan. Two runs of one seed, each with its scores
    computed afresh, propose the same configurations."""
    prior = tmp_path / "prior.db"
    kernel = get_kernel("matmul_s8")
    stored = TuningDatabase(prior)
    tune(TuneRequest(kernel, get_target("cortex-m55"), kernel.parse_shape("m=4,n=8,k=8"), "random", 4, 1, 0), stored)
    stored.close()  # every trial in the one file copied
    shape = "m=4,n=8,k=16"
    first, search = live_proposals(tmp_path, "a", "matmul_s8", shape, "transfer+code", 4, 5, prior)
    second, _ = live_proposals(tmp_path, "b", "matmul_s8", shape, "transfer+code", 4, 5, prior)
    assert search.ranking_on and search.scored > 0
    assert first == second and len(first) == 4


@pytest.mark.qemu
def test_with_its_gate_shut_transfer_code_proposes_what_transfer_does_on_a_live_space(tmp_path):
    """On the Cortex-M55, fir_q15 has one recorded space: however well the code estimate
    ranks it, one shape is no evidence for another (MIN_SPACES). Before its own trials can
    judge the ranking (GATE_TRIALS), the gate is shut, nothing is compiled to be ranked, and
    the search is `transfer`, proposal for proposal."""
    shape = "taps=16,block=32,rounding=nearest"
    ranked, search = live_proposals(tmp_path, "a", "fir_q15", shape, "transfer+code", 5, 2, target="cortex-m55")
    plain, _ = live_proposals(tmp_path, "b", "fir_q15", shape, "transfer", 5, 2, target="cortex-m55")
    assert search.kernel_fit is not None and search.kernel_fit.spaces == 1 and not search.votes_from_start
    assert not search.ranking_on and search.scored == 0
    assert ranked == plain and len(plain) == 5


@pytest.mark.qemu
def test_on_the_static_profiles_fit_the_m4s_matmul_code_votes_from_the_first_plan(tmp_path):
    """matmul_s8's three recorded M4 spaces: instructions per product ranked them at
    0.74-0.77, below GATE_KERNEL_RHO; the static profile (trip counts worked out,
    edgetune.targets.static_profile) ranks them at 0.97 or so, so the code votes from the first
    plan and screens the design points."""
    _, search = live_proposals(tmp_path, "a", "matmul_s8", "m=4,n=8,k=16", "transfer+code", 13, 2,
                               target="cortex-m4")  # nine design points, then the model's plans
    fit = search.kernel_fit
    assert fit.spaces == 3 and fit.rho >= 0.9 > GATE_KERNEL_RHO
    assert search.votes_from_start and search._screen is not None and search.scored > 0