"""`edgetune record` and `edgetune replay`: whole spaces to files, and searches against them.

Recording is an exhaustive tune (so it resumes through the database like any tune) whose
trials are then written in edgetune's recorded-space format (edgetune.tuner.recorded).
Replaying runs a strategy against such a file, or a Kernel Tuner cache file, instead of
hardware, so strategies can be compared and scored on real measurements in seconds.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import numpy as np

from edgetune.codegen import CodegenError, Kernel
from edgetune.hal import Target
from edgetune.targets.code_features import variant_features
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError
from edgetune.tuner import Config, TuningDatabase
from edgetune.tuner.code_explore import CodeRankedTransfer, KernelFit
from edgetune.tuner.code_rank import CodeRanker, CodeRankerError, RankByCode
from edgetune.tuner.product_rank import ProductRanker, holds_products, product_fit_among, spaces_with_products
from edgetune.tuner.recorded import (RecordedSpace, ReplayRun, as_prior, recorded_space_json, replay, replay_search,
                                     write_recorded)

from . import __version__
from .session import ProgressFn, TuneRequest, TuneSummary, search_space, tune, workload_of
from .value_roles import target_roles

# `transfer` with the gated ranking by compiled code (tuner.code_explore): its score is the
# space's own instructions per product (tuner.product_rank); the kernel's recorded spaces
# elsewhere (--rank-with) are the gate's first evidence.
RANKED_TRANSFER = CodeRankedTransfer.name


def record(kernel: Kernel, target: Target, shape: dict, out: Path, db: TuningDatabase, jobs: int = 1,
           progress: ProgressFn | None = None) -> tuple[TuneSummary, Path]:
    """Measure every legal configuration (skipping stored ones) and write the space to `out`."""
    space = search_space(kernel, target, shape, target.measures)
    # Every configuration is measured whatever the workload is tuned for: its goal is left alone.
    summary = tune(TuneRequest(kernel, target, shape, "exhaustive", budget=len(space), jobs=jobs,
                               objective=target.measures, remember_goal=False), db, progress)
    workload = workload_of(kernel, target, shape)
    legal = {config.key() for config in space}
    trials = [t for t in db.trials(workload) if t.config.key() in legal]
    document = recorded_space_json(
        kernel.name, kernel.version, target.name, shape, target.measures, space.params, trials,
        provenance=provenance_of(db, workload.key()),
        features=code_features_of(kernel, target, shape, [t.config for t in trials if not t.outcome.failed]))
    return summary, write_recorded(out, document)


def provenance_of(db: TuningDatabase, workload: str) -> dict[str, str]:
    """Where a recorded space came from, the same on any machine: edgetune's version, when,
    the workload's key and the database file by its name (its folder says nothing about the
    measurements and would publish the recorder's own paths)."""
    return {"tool": f"edgetune {__version__}", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "database": db.path.name, "workload": workload}


def code_features_of(kernel: Kernel, target: Target, shape: dict, configs: Sequence[Config]) -> dict[str, dict]:
    """Compiled-code features by Config.key() (edgetune.targets.code_features), for every
    configuration that compiles; none on a target without a disassembler. The objects come
    from the build cache where the tune just built them."""
    if target.cost is None:
        return {}
    runner = runner_for(target)
    found = {}
    with tempfile.TemporaryDirectory(prefix="edgetune-features-") as root:
        for n, config in enumerate(configs):
            workdir = Path(root) / str(n)
            workdir.mkdir()
            try:
                found[config.key()] = variant_features(runner, kernel, shape, config, workdir)
            except (CodegenError, MeasureError):
                pass  # it was measured, so it compiled then; a variant that no longer does has no features
            shutil.rmtree(workdir, ignore_errors=True)
    return found


def check_rank_with(recorded: RecordedSpace, rank_with: Sequence[RecordedSpace], strategy: str) -> None:
    """Refuse --rank-with files of which none can serve a learnt ranker (none holds code
    features), naming them; a file that cannot serve among others that can is left out, as
    the replayed space itself is (so a folder's files can be given at once). `transfer+code`
    learns nothing: its --rank-with files are only evidence, and what it judged is reported."""
    if strategy == RANKED_TRANSFER or not rank_with:
        return
    if not any(s.features for s in rank_with if s.path != recorded.path):
        names = ", ".join(s.path for s in rank_with)
        raise CodeRankerError(f"--rank-with {names}: no file other than the replayed space holds code features to "
                              f"learn a ranker from (record them with `edgetune record`, or add them with "
                              f"bench/code_features.py)")


def judged_spaces(recorded: RecordedSpace, rank_with: Sequence[RecordedSpace]) -> list[RecordedSpace]:
    """The --rank-with spaces `transfer+code` judges its ranking on: the kernel's other
    recorded spaces on the same target that count products."""
    return spaces_with_products([s for s in rank_with if s.path != recorded.path], recorded.kernel, recorded.target)


def replay_json(recorded: RecordedSpace, strategy: str, budget: int, seed: int, repeats: int,
                prior: Sequence[RecordedSpace] = (), rank_with: Sequence[RecordedSpace] = (),
                keep: float | None = None, objective: str = "") -> dict:
    """Repeat r uses seed + r. The shape of the output is the contract scorers rely on.
    `rank_with`: recorded spaces with code features; given, a ranker learnt from them (never
    from `recorded` itself) orders the strategy's proposals (tuner.code_rank.RankByCode).
    `transfer+code` (RANKED_TRANSFER) ranks by `recorded`'s own code estimate (static profile, else instructions per product)
    (tuner.product_rank), voting in `transfer`'s choices behind its gate (tuner.code_explore),
    whose first evidence is how well that ranks the kernel's spaces among `rank_with`.
    Prior values are mapped by their targets' value roles (edgetune.value_roles).
    `objective`: another recorded value to minimise (default: the recording's own)."""
    recorded = recorded.minimising(objective)
    priors = [as_prior(p, target_roles(p.target)) for p in prior]
    roles = target_roles(recorded.target)
    if strategy == RANKED_TRANSFER:
        if not holds_products(recorded):
            raise CodeRankerError(f"{recorded.path}: its code features count no multiplies (record it again with "
                                  f"`edgetune record`, or add them with bench/code_features.py)")
        predicted = ProductRanker().predicted_ranks(recorded)
        judged = judged_spaces(recorded, rank_with)
        fit = product_fit_among(judged, recorded.kernel, recorded.target)
        runs = [ranked_transfer_run(recorded, budget, seed + r, priors, predicted, fit) for r in range(repeats)]
        ranking = {"kernel_fit": None if fit is None else asdict(fit), "judged_on": [s.path for s in judged]}
    else:
        wrap, ranking = None, None
        if rank_with:
            predicted = CodeRanker.fit(rank_with, recorded).predicted_ranks(recorded)

            def wrap(search):
                return RankByCode(search, lambda config: predicted.get(recorded.space.index_of(config)), keep=keep)
        runs = [replay(recorded, strategy, budget, seed + r, priors, wrap, roles) for r in range(repeats)]
    values = recorded.values()
    return {"edgetune": __version__, "space": recorded.path, "kernel": recorded.kernel, "target": recorded.target,
            "objective": recorded.objective, "strategy": strategy, "budget": budget,
            "size": len(recorded.space), "failures": recorded.failures, "code_ranking": ranking,
            "optimum": float(values.min()) if len(values) else None,
            "repeats": [_run_json(run) for run in runs]}


def ranked_transfer_run(recorded: RecordedSpace, budget: int, seed: int, priors, predicted: dict[int, float],
                        fit: KernelFit | None) -> ReplayRun:
    """One replay of `transfer+code`: `predicted` are the scores of `recorded`'s points (their
    compiled code's instructions per product) and `fit` how well those rank the kernel's other
    recorded spaces (tuner.product_rank.product_fit_among), never `recorded` itself."""
    search = CodeRankedTransfer(recorded.space, np.random.default_rng(seed), recorded.objective, prior=tuple(priors),
                                budget=budget, roles=target_roles(recorded.target), kernel_fit=fit,
                                score=lambda config: predicted.get(recorded.space.index_of(config)))
    return replay_search(recorded, search, budget, seed)


def _run_json(run: ReplayRun) -> dict:
    """One repeat: its best, the objective in evaluation order (`trace`), and each
    evaluation's configuration, value and the strategy's own time for it (`trials`)."""
    seconds = run.strategy_seconds
    return {"seed": run.seed, "best": run.best, "best_config": run.best_config, "trace": list(run.trace),
            "strategy_ms_per_proposal": round(1000 * sum(seconds) / len(seconds), 4) if seconds else None,
            "trials": [{"config": config, "value": value, "strategy_ms": round(1000 * s, 4)}
                       for config, value, s in zip(run.configs, run.trace, seconds)]}
