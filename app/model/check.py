"""After a model is tuned: each tuned layer's chosen variant, built for the target and run there
(in its emulator, or natively on the host), on the layer's real weights and quantisation, must
give TFLite Micro's output bit for bit (app/model/oracle.py runs TFLite Micro's reference
kernels on the host). Tuning itself checks variants against edgetune's numpy references on
drawn inputs; this check is against an oracle edgetune did not write, with the model's own
constants, on a random input and a saturating one (only -128 and 127) per layer.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from edgetune.codegen import KERNELS, CodegenError, KernelIO
from edgetune.model import Model, ModelLayer
from edgetune.model.oracle import layer_case, oracle_name
from edgetune.codegen.placement import PlacementError
from edgetune.hal import Target
from edgetune.targets.measure import Expected, MeasureInput, Pipeline, Run, VariantProgram, failure_text
from edgetune.targets.runners import runner_for
from edgetune.tuner import Bound, Goal, TuningDatabase

from edgetune.check_memory import check_key, recall, remember
from edgetune.identity import measurement_fingerprint
from edgetune.session import compiled_by, workload_of

EDGES = ("random", "extreme")  # one uniform int8 input, one of only -128/127 (saturates)


@dataclass(frozen=True)
class LayerCheck:
    """One tuned layer's verdict: its best variant against TFLite Micro."""

    index: int
    op: str
    kernel: str
    config: str  # the variant checked, or "" when the workload has no feasible trial
    inputs: int  # how many inputs matched TFLite Micro
    problem: str = ""  # empty: bit-exact on every input
    checked: bool = True  # False: there was no variant to run (problem says why)
    oracle: str = "TFLite Micro"  # what judged it (a CUSTOM operator: its kernel's reference)
    remembered: bool = False  # the verdict of an earlier check of the same content (app/check_memory.py)

    @property
    def ok(self) -> bool:
        return not self.problem


def _first_difference(got: np.ndarray, want: np.ndarray, oracle: str = "TFLite Micro") -> str:
    bad = got != want
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {want.size} outputs differ from {oracle}; first at {at}: "
            f"got {int(got[at])}, {oracle} {int(want[at])}")


def _run_layer(layer: ModelLayer, target: Target, config, cases: list[tuple[KernelIO, np.ndarray]],
               workdir: Path) -> tuple[int, str]:
    """Build the layer's variant once, run it on every case; (inputs matched, problem)."""
    kernel = KERNELS[layer.kernel]
    shape = layer.shape_dict
    oracle = oracle_name(layer)

    def compare(_, got, want):
        got = got.reshape(want.shape)
        return "" if np.array_equal(got, want) else _first_difference(got, want, oracle)

    try:
        rendered = kernel.render(target, shape, config)
        # weights packed as an export ships them; outputs laid out as the plain buffers say
        runs = tuple(Run(kernel.deployed_io(io, config), Expected((want,), compare, io)) for io, want in cases)
        result = Pipeline(runner_for(target)).measure(MeasureInput(VariantProgram(kernel, shape, rendered), runs),
                                                      workdir)
    except (CodegenError, PlacementError) as exc:
        return 0, f"does not build: {exc}"
    wrong = result.first_wrong
    if wrong is not None:
        return wrong, f"{EDGES[wrong % len(EDGES)]} input: {result.runs[wrong].problem}"
    if result.fault is not None:
        return 0, failure_text(result)
    return len(cases), ""


def check_layer(layer: ModelLayer, target: Target, db: TuningDatabase, goal: Goal, seed: int,
                work_root: Path, compilers: tuple[str, ...] = (), memory: Callable[[ModelLayer, str], str] | None = None,
                pinned: Mapping | None = None) -> LayerCheck:
    """The layer's best stored variant against its oracle (`pinned`: that configuration
    instead, the one a RAM bound chose). `memory(layer, config key)`: the key its verdict is
    remembered under (app/check_memory.py); a bit-exact verdict found there is reused, not
    run again."""
    kernel = KERNELS[layer.kernel]
    shape = layer.shape_dict
    best = None if pinned is not None else db.best(workload_of(kernel, target, shape), goal.objective,
                                                   lambda t: goal.allows(t) and compiled_by(t, compilers))
    if best is None and pinned is None:
        return LayerCheck(layer.index, layer.op, layer.kernel, "", 0, "no feasible trial", checked=False,
                          oracle=oracle_name(layer))
    config = kernel.tuning_space(target, shape).make(dict(pinned) if pinned is not None else
                                                     best.trial.config.as_dict())
    shown = best.trial.config.key() if best is not None else config.key()
    key = memory(layer, config.key()) if memory is not None else None
    remembered = recall(key) if key else None
    if remembered is not None:
        return LayerCheck(layer.index, layer.op, layer.kernel, shown, remembered,
                          oracle=oracle_name(layer), remembered=True)
    rng = np.random.default_rng([seed, layer.index])
    cases = [layer_case(layer, rng, edge) for edge in EDGES]
    workdir = Path(tempfile.mkdtemp(prefix=f"layer{layer.index}-", dir=work_root))
    try:
        matched, problem = _run_layer(layer, target, config, cases, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if key and not problem:
        remember(key, matched)
    return LayerCheck(layer.index, layer.op, layer.kernel, shown, matched, problem,
                      oracle=oracle_name(layer))


def check_model(model: Model, target: Target, db: TuningDatabase, objective: str,
                bounds: tuple[Bound, ...] = (), seed: int = 0, progress=None,
                compilers: tuple[str, ...] = (), recheck: bool = False,
                chosen: Mapping[tuple, Mapping] | None = None) -> tuple[LayerCheck, ...]:
    """Every tuned layer of `model`, its best stored variant for the goal (built by one of
    `compilers`, when given; `chosen`: (kernel, shape) -> the configuration to check instead,
    a RAM bound's choice), against TFLite Micro. A variant found bit-exact before, with the
    same content (app/check_memory.py), is not run again unless `recheck`."""
    goal = Goal(objective, bounds)
    checks = []
    model_bytes, fingerprint = Path(model.path).read_bytes(), measurement_fingerprint(target)

    def memory(layer: ModelLayer, config_key: str) -> str:
        return check_key(model_bytes, layer.index, seed, fingerprint, KERNELS[layer.kernel], config_key)

    with tempfile.TemporaryDirectory(prefix="edgetune-check-") as tmp:
        for layer in model.tuned:
            check = check_layer(layer, target, db, goal, seed, Path(tmp), compilers, None if recheck else memory,
                                (chosen or {}).get((layer.kernel, layer.shape)))
            checks.append(check)
            if progress is not None:
                progress(check)
    return tuple(checks)
