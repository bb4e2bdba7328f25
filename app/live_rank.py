"""`transfer+code` in a live tune: the candidates the search is about to choose between are
compiled (through the build cache), their code's features read (edgetune.targets.code_features)
and scored by a ranker learnt on recorded spaces, and tuner.code_explore.CodeRankedTransfer
votes with the score behind its gate, exactly as `edgetune replay --strategy transfer+code` does.

- **What the ranker learns from**: the recorded spaces with code features that ship with
  edgetune (package data, `edgetune/ranking_spaces/`, which bench/spaces links
  to), never a checkout's bench/ folder. A space recording the very
  workload being tuned is left out (the ranker never learns the answers it is asked for), so
  its figures are leave-one-space-out as the replay's are. The gate's first evidence, the
  ranker's fit on the kernel's other recorded spaces (tuner.code_rank.kernel_fit), comes from
  the same files. The ranker is learnt once per process (a forest of 100 trees: seconds), the
  fit once per kernel and kept in the cache folder.
- **Centring**: the ranker reads log counts centred on the space's median. A replay knows the
  whole space; a live search takes the median of CENTRE_SAMPLE points spread evenly over the
  legal set (no random draw: the seed's generator stays the strategy's), compiled on first use.
- **A candidate that does not render or compile** has no score and ranks behind every scored
  one; if the search runs it anyway, its trial fails as any other such trial does.
- **Cheap to repeat**: each configuration is compiled and read once per process (`model tune`
  opens a layer's search again each round), under the name a batched image gives it
  (targets.batch.member_function) when the runner batches, so the run's own build finds the
  object in the cache. Candidates scored together compile side by side on `jobs` threads.
- **Reproducible**: the sample, the ranker (seed 0) and the compiled code do not depend on
  anything but the workload, so a seed reproduces the run, and a resumed search replays it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from edgetune.codegen import CodegenError, Kernel
from edgetune.codegen.placement import PlacementError
from edgetune.errors import EdgetuneError
from edgetune.hal import Target
from edgetune.targets.batch import member_function
from edgetune.targets.code_features import variant_features
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError, cache_dir
from edgetune.tuner import Config, Space
from edgetune.tuner.code_rank import CodeRanker, kernel_fit_among, log_centre
from edgetune.tuner.recorded import RecordedSpace, load_recorded

RANKING_SPACES = Path(__file__).resolve().parent / "ranking_spaces"
# Points of the space compiled to centre the features on (their median log counts). On the
# eight recorded spaces, predictions centred on 16 evenly spread points rank each space as those
# centred on all of it do, to a rank correlation of 0.91-0.995 (bench/live_rank.py --centre).
CENTRE_SAMPLE = 16


class CodeRankingError(EdgetuneError, ValueError):
    """`transfer+code` asked of a workload whose code cannot be read (an NPU operator, a
    target without a disassembler)."""


@functools.lru_cache(maxsize=1)
def ranking_spaces() -> tuple[RecordedSpace, ...]:
    """The recorded spaces with code features that ship with edgetune."""
    return tuple(s for s in (load_recorded(p) for p in sorted(RANKING_SPACES.glob("*.json.gz"))) if s.features)


def records_workload(space: RecordedSpace, kernel: str, target: str, shape: dict) -> bool:
    """Whether a recorded space measured this workload (its kernel, target and every shape
    value it recorded)."""
    return (space.kernel == kernel and space.target == target
            and all(str(shape.get(name)) == str(value) for name, value in space.shape))


@dataclass(frozen=True)
class LiveRanker:
    ranker: CodeRanker
    kernel_fit: float | None  # tuner.code_rank.kernel_fit: the gate's evidence before the first trial
    left_out: tuple[str, ...]  # recorded spaces of this very workload, not learnt from


def live_ranker(kernel: str, target: str, shape: dict) -> LiveRanker:
    """The ranker for a workload, learnt from the shipped spaces that did not record it."""
    left_out = tuple(Path(s.path).name for s in ranking_spaces() if records_workload(s, kernel, target, shape))
    return LiveRanker(_ranker(left_out), _kernel_fit(left_out, kernel, target), left_out)


@functools.lru_cache(maxsize=4)
def _ranker(left_out: tuple[str, ...]) -> CodeRanker:
    # Most workloads are recorded nowhere: they share one ranker, learnt once per process.
    return CodeRanker.learn(_training(left_out))


def _training(left_out: tuple[str, ...]) -> list[RecordedSpace]:
    return [s for s in ranking_spaces() if Path(s.path).name not in left_out]


@functools.lru_cache(maxsize=32)
def _kernel_fit(left_out: tuple[str, ...], kernel: str, target: str) -> float | None:
    """kernel_fit_among the training spaces: one forest per recorded space of the kernel, so
    it is kept in the cache folder by what it was computed from (the files' contents, the
    kernel, the target, scikit-learn's version): a few seconds once, not at every tune."""
    import sklearn

    training = _training(left_out)
    digest = hashlib.sha256(f"{kernel}/{target}/{sklearn.__version__}".encode())
    for space in training:
        digest.update((RANKING_SPACES / Path(space.path).name).read_bytes())
    stored = cache_dir() / "code-ranking" / f"kernel-fit-{digest.hexdigest()[:24]}.json"
    try:
        return json.loads(stored.read_text())["kernel_fit"]
    except (OSError, ValueError, KeyError):
        pass
    fit = kernel_fit_among(training, kernel, target=target)
    stored.parent.mkdir(parents=True, exist_ok=True)
    partial = stored.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({"kernel": kernel, "target": target, "kernel_fit": fit}))
    partial.replace(stored)  # whole or not at all: processes may share the folder
    return fit


class CodeScore:
    """score(config) for CodeRankedTransfer: the predicted rank (0 best .. 1 worst) of the
    configuration's compiled code, None when it does not render or compile. One per workload
    and process (code_ranking); shared by every copy of a strategy (a resumed search copies
    its strategy to replay it), as a compiler is: it holds no state of the search."""

    def __init__(self, ranker: LiveRanker, kernel: Kernel, target: Target, shape: dict, space: Space,
                 batched: bool, jobs: int, workload_key: str = ""):
        self.workload_key = workload_key
        self.live, self.kernel, self.target, self.shape, self.space = ranker, kernel, target, dict(shape), space
        self.batched, self.jobs = batched, max(1, jobs)
        self.runner = runner_for(target)
        self._features: dict[str, dict | None] = {}
        self._scores: dict[str, float | None] = {}
        self._centre: np.ndarray | None = None
        self._lock = threading.Lock()
        self.compile_seconds = 0.0  # spent compiling and reading code, over every call
        self.compiled_at: dict[str, float] = {}  # configuration key -> time.monotonic() when it was read

    def __deepcopy__(self, memo) -> "CodeScore":
        return self

    @property
    def compiled(self) -> frozenset[str]:
        """Configuration keys compiled for scoring (the centre's sample included)."""
        return frozenset(self._features)

    def features(self, config: Config) -> dict | None:
        key = config.key()
        if key not in self._features:
            found = self._compile(config)
            with self._lock:
                self._features[key] = found
                self.compiled_at.setdefault(key, time.monotonic())
        return self._features[key]

    def _compile(self, config: Config) -> dict | None:
        started = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory(prefix="edgetune-rank-") as workdir:
                fn = member_function(self.kernel, self.shape, config) if self.batched else None
                return variant_features(self.runner, self.kernel, self.shape, config, Path(workdir), fn)
        except (CodegenError, PlacementError, MeasureError):
            return None  # no code to score: it ranks last, and fails as a trial if it is run
        finally:
            with self._lock:
                self.compile_seconds += time.perf_counter() - started

    def prefetch(self, configs: Sequence[Config]) -> None:
        """Compile and score `configs` together: side by side on `jobs` threads, predicted at once."""
        fresh = [c for c in dict.fromkeys(configs) if c.key() not in self._features]
        if self.jobs > 1 and len(fresh) > 1:
            with ThreadPoolExecutor(max_workers=self.jobs) as pool:
                list(pool.map(self.features, fresh))
        self._predict([c for c in dict.fromkeys(configs) if c.key() not in self._scores])

    def _predict(self, configs: Sequence[Config]) -> None:
        rows = [(c.key(), f) for c in configs if (f := self.features(c)) is not None]
        predicted = self.live.ranker.predict([f for _, f in rows], self.centre)
        self._scores.update({c.key(): None for c in configs})
        self._scores.update({key: float(p) for (key, _), p in zip(rows, predicted)})

    @property
    def centre(self) -> np.ndarray:
        """Median log counts of CENTRE_SAMPLE points spread evenly over the legal set."""
        if self._centre is None:
            legal = self.space.legal_indices()
            picks = np.unique(np.linspace(0, len(legal) - 1, min(CENTRE_SAMPLE, len(legal))).round().astype(int))
            sample = [self.space.config_at(int(legal[p])) for p in picks]
            if self.jobs > 1:
                with ThreadPoolExecutor(max_workers=self.jobs) as pool:
                    list(pool.map(self.features, sample))
            rows = [f for f in map(self.features, sample) if f is not None]
            names = self.live.ranker.names
            self._centre = log_centre(rows, names) if rows else np.zeros(len(names))
        return self._centre

    def __call__(self, config: Config) -> float | None:
        if config.key() not in self._scores:
            self._predict([config])
        return self._scores[config.key()]


_SCORES: dict[tuple, CodeScore] = {}
_SCORES_LOCK = threading.Lock()


def code_ranking(kernel: Kernel, target: Target, shape: dict, space: Space, workload_key: str, jobs: int) -> dict:
    """make_strategy's `ranking` options for `transfer+code` on a CPU workload: the score,
    its prefetch and the ranker's fit on the kernel's other recorded spaces."""
    if target.cost is None:
        raise CodeRankingError(f"--strategy transfer+code: target {target.name} names no disassembler (no [cost] "
                               f"table), so its compiled code cannot be read")
    batched = runner_for(target).batches
    key = (workload_key, len(space), batched)
    with _SCORES_LOCK:
        score = _SCORES.get(key)
        if score is None:
            ranker = live_ranker(kernel.name, target.name, shape)
            score = _SCORES[key] = CodeScore(ranker, kernel, target, shape, space, batched, jobs, workload_key)
    return {"score": score, "prefetch": score.prefetch, "kernel_fit": score.live.kernel_fit}


def scores_made() -> tuple[CodeScore, ...]:
    """Every live score of this process (what they compiled, for bench/live_rank.py)."""
    with _SCORES_LOCK:
        return tuple(_SCORES.values())


def forget_scores() -> None:
    """Drop the scores (and what they compiled) of this process: a run measured afresh."""
    with _SCORES_LOCK:
        _SCORES.clear()
