"""`transfer+code` in a live tune: the candidates the search is about to choose between are
compiled (through the build cache), their code's features read (edgetune.targets.code_features)
and scored by the instructions the code is estimated to run (edgetune.tuner.product_rank.
estimates: its static profile on T32 code, else instructions per product), and
tuner.code_explore.CodeRankedTransfer votes with the score behind its gate, exactly as
`edgetune replay --strategy transfer+code` does.

- **The gate's first evidence**: how well that score ranks the kernel's recorded
  spaces on the target among those that ship with edgetune (package data,
  `edgetune/ranking_spaces/`, which bench/spaces links to), never a checkout's bench/ folder.
  A space recording the very workload being tuned is left out (the search never learns the
  answers it is asked for), so its figures are leave-one-space-out as the replay's are.
- **A candidate that does not render or compile** has no score and ranks behind every scored
  one; if the search runs it anyway, its trial fails as any other such trial does.
- **Cheap to repeat**: each configuration is compiled and read once per process (`model tune`
  opens a layer's search again each round), its read kept in the cache folder for other
  processes and later runs (targets.code_features.cached_read). It is compiled under the
  name a batched image gives it (targets.batch.member_function) when the runner batches,
  so the run's own build finds the object in the cache. Candidates scored together compile
  side by side on `jobs` threads, and their code is read (the static profile, pure Python
  and most of the time) in `jobs` processes (edgetune.read_pool).
- **Reproducible**: the score depends on nothing but the compiled code, so a seed reproduces
  the run, and a resumed search replays it.
"""
from __future__ import annotations

import contextlib
import functools
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from edgetune.codegen import CodegenError, Kernel
from edgetune.codegen.placement import PlacementError
from edgetune.errors import EdgetuneError
from edgetune.hal import Target
from edgetune.targets.batch import member_function
from edgetune.targets.code_features import cached_read, variant_disassembly
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError
from edgetune.tuner import STRATEGIES, Config, Space
from edgetune.tuner.code_explore import KernelFit
from edgetune.tuner.product_rank import ProductRanker, product_fit_among
from edgetune.tuner.recorded import RecordedSpace, load_recorded

from . import ahead
from .read_pool import read_in_parallel, shut_readers

RANKING_SPACES = Path(__file__).resolve().parent / "ranking_spaces"


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
    ranker: ProductRanker
    kernel_fit: KernelFit | None  # tuner.product_rank.product_fit_among: the gate's evidence before the first trial
    left_out: tuple[str, ...]  # recorded spaces of this very workload, not judged


def live_ranker(kernel: str, target: str, shape: dict) -> LiveRanker:
    """The ranking for a workload, with its fit on the shipped spaces that did not record it."""
    left_out = tuple(Path(s.path).name for s in ranking_spaces() if records_workload(s, kernel, target, shape))
    judged = [s for s in ranking_spaces() if Path(s.path).name not in left_out]
    return LiveRanker(ProductRanker(), product_fit_among(judged, kernel, target), left_out)


class CodeScore:
    """score(config) for CodeRankedTransfer: the estimated cost of the configuration's
    compiled code (tuner.product_rank.estimates; lower is better), None when it does not render or
    compile. One per workload and process (code_ranking); shared by every copy of a strategy
    (a resumed search copies its strategy to replay it), as a compiler is: it holds no state
    of the search."""

    def __init__(self, ranker: LiveRanker, kernel: Kernel, target: Target, shape: dict, batched: bool, jobs: int,
                 workload_key: str = ""):
        self.workload_key = workload_key
        self.live, self.kernel, self.target, self.shape = ranker, kernel, target, dict(shape)
        self.batched, self.jobs = batched, max(1, jobs)
        self.runner = runner_for(target)
        self._features: dict[str, dict | None] = {}
        self._scores: dict[str, float | None] = {}
        self._lock = threading.Lock()
        self._compiling: dict[str, threading.Event] = {}  # keys being compiled (by a search or ahead), set when done
        # (start, end) on time.monotonic() of each compile and read: those of threads side
        # by side overlap, so the host's wall time is their union.
        self.busy: list[tuple[float, float]] = []
        # (start, end) of each time the search waited on scores (prefetch, a score asked
        # for): what a board's timing pays (bench/live_rank.py); compiles done ahead while
        # trials ran are in `busy` only.
        self.waited: list[tuple[float, float]] = []
        self.compiled_at: dict[str, float] = {}  # configuration key -> time.monotonic() when it was read

    def __deepcopy__(self, memo) -> "CodeScore":
        return self

    @property
    def compiled(self) -> frozenset[str]:
        """Configuration keys compiled for scoring."""
        return frozenset(self._features)

    def features(self, config: Config) -> dict | None:
        """The configuration's code features (None: no code), compiled once: a thread
        asking for one another thread is compiling waits for it."""
        key = config.key()
        while True:
            with self._lock:
                if key in self._features:
                    return self._features[key]
                underway = self._compiling.get(key)
                if underway is None:
                    done = self._compiling[key] = threading.Event()
                    break
            underway.wait()
        try:
            found = self._compile(config)
            with self._lock:
                self._features[key] = found
                self.compiled_at.setdefault(key, time.monotonic())
            return found
        finally:
            with self._lock:
                del self._compiling[key]
            done.set()

    def ahead(self, configs: Sequence[Config], first: bool = False) -> int:
        """Queue `configs` to be compiled and read in the background (edgetune.ahead: while
        no search waits on scores), ready when the search asks; returns how many were queued.
        `first`: before what is queued already, in their order (needed next)."""
        fresh = [c for c in dict.fromkeys(configs) if c.key() not in self._features]
        for config in reversed(fresh) if first else fresh:
            ahead.submit(self, functools.partial(self.features, config), self.jobs, first)
        return len(fresh)

    def is_compiled(self, config: Config) -> bool:
        """Whether the configuration's code has been compiled and read (compiled_score is quick)."""
        with self._lock:
            return config.key() in self._features

    def compiled_score(self, config: Config) -> float | None:
        """The score of a configuration already compiled (is_compiled): nothing is waited for."""
        if config.key() not in self._scores:
            self._predict([config])
        return self._scores[config.key()]

    def _compile(self, config: Config) -> dict | None:
        started = time.monotonic()
        try:
            with tempfile.TemporaryDirectory(prefix="edgetune-rank-") as workdir:
                fn = member_function(self.kernel, self.shape, config) if self.batched else None
                code = variant_disassembly(self.runner, self.kernel, self.shape, config, Path(workdir), fn)
            return cached_read(code, functools.partial(read_in_parallel, jobs=self.jobs))
        except (CodegenError, PlacementError, MeasureError):
            return None  # no code to score: it ranks last, and fails as a trial if it is run
        finally:
            ended = time.monotonic()
            with self._lock:
                self.busy.append((started, ended))

    def prefetch(self, configs: Sequence[Config]) -> None:
        """Compile and score `configs` together: side by side on `jobs` threads, predicted at once."""
        with self._waiting():
            fresh = [c for c in dict.fromkeys(configs) if c.key() not in self._features]
            if self.jobs > 1 and len(fresh) > 1:
                with ThreadPoolExecutor(max_workers=self.jobs) as pool:
                    list(pool.map(self.features, fresh))
            self._predict([c for c in dict.fromkeys(configs) if c.key() not in self._scores])

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        """The search waits on scores: nothing queued ahead starts meanwhile; the time is kept."""
        started = time.monotonic()
        try:
            with ahead.foreground():
                yield
        finally:
            ended = time.monotonic()
            with self._lock:
                self.waited.append((started, ended))

    def _predict(self, configs: Sequence[Config]) -> None:
        rows = [(c.key(), f) for c in configs if (f := self.features(c)) is not None]
        predicted = self.live.ranker.predict([f for _, f in rows])
        self._scores.update({c.key(): None for c in configs})
        self._scores.update({key: float(p) for (key, _), p in zip(rows, predicted)})

    def __call__(self, config: Config) -> float | None:
        if config.key() not in self._scores:
            with self._waiting():
                self._predict([config])
        return self._scores[config.key()]


class CompilesNeeded(Exception):
    """What a search probed with ScoreProbe would compile before it could go on."""

    def __init__(self, configs: Sequence[Config]):
        super().__init__(f"{len(configs)} candidates to compile")
        self.configs = tuple(configs)


@dataclass(frozen=True)
class ScoreProbe:
    """`score` and `prefetch` for a copy of a search that must compile nothing (looking ahead,
    edgetune.search_ahead): the scores of candidates already compiled are given as the
    search's own CodeScore gives them; the first time the copy would compile, CompilesNeeded
    is raised with what it would compile."""

    score: CodeScore

    def __call__(self, config: Config) -> float | None:
        if not self.score.is_compiled(config):
            raise CompilesNeeded([config])
        return self.score.compiled_score(config)

    def prefetch(self, configs: Sequence[Config]) -> None:
        fresh = [c for c in dict.fromkeys(configs) if not self.score.is_compiled(c)]
        if fresh:
            raise CompilesNeeded(fresh)

    def ranking(self, ranking: dict) -> dict:
        """`ranking` (code_ranking's options) with this probe in place of its score."""
        return {**ranking, "score": self, "prefetch": self.prefetch}


_SCORES: dict[tuple, CodeScore] = {}
_SCORES_LOCK = threading.Lock()


def check_code_readable(strategy: str, target: Target, device: str = "cpu") -> None:
    """Refuse, before anything is opened or run, a strategy that ranks compiled code where
    that code cannot be read: an NPU operator (compiled by Vela), a target without a
    disassembler. Any other strategy passes."""
    if not STRATEGIES[strategy].uses_code:
        return
    if device != "cpu":
        raise CodeRankingError(f"--strategy {strategy}: ranks the compiled code of CPU kernels; an NPU operator "
                               f"(--device {device}) is compiled by Vela")
    if target.cost is None:
        raise CodeRankingError(f"--strategy {strategy}: target {target.name} names no disassembler (no [cost] "
                               f"table), so its compiled code cannot be read")


def code_ranking(kernel: Kernel, target: Target, shape: dict, space: Space, workload_key: str, jobs: int) -> dict:
    """make_strategy's `ranking` options for `transfer+code` on a CPU workload: the score,
    its prefetch and the ranker's fit on the kernel's other recorded spaces."""
    check_code_readable("transfer+code", target)
    batched = runner_for(target).batches
    key = (workload_key, len(space), batched)
    with _SCORES_LOCK:
        score = _SCORES.get(key)
        if score is None:
            ranker = live_ranker(kernel.name, target.name, shape)
            score = _SCORES[key] = CodeScore(ranker, kernel, target, shape, batched, jobs, workload_key)
    return {"score": score, "prefetch": score.prefetch, "kernel_fit": score.live.kernel_fit}


def scores_made() -> tuple[CodeScore, ...]:
    """Every live score of this process (what they compiled, for bench/live_rank.py)."""
    with _SCORES_LOCK:
        return tuple(_SCORES.values())


# Runner kinds whose trials leave the host's cores idle (a board flashing and running):
# only there is compiling ahead worth its cost. On an emulator the trials take the cores
# (DS-CNN on the M55's QEMU, two seeds: 840 and 770 candidates compiled rather than 410-713,
# and 30% more wall time, the builds of the trials slowed by the compiles beside them).
AHEAD_RUNNERS = {"serial"}


def compiles_ahead(target: Target) -> bool:
    """Whether a tune on `target` compiles candidates ahead while its trials run."""
    return target.runner.kind in AHEAD_RUNNERS


def stop_ahead(workload_key: str) -> int:
    """Drop what the workload's scores queued to compile ahead and have not started."""
    return sum(ahead.cancel(s) for s in scores_made() if s.workload_key == workload_key)


def forget_scores() -> None:
    """Drop the scores (and what they compiled) of this process, and its readers: a run
    measured afresh."""
    with _SCORES_LOCK:
        scores = list(_SCORES.values())
        _SCORES.clear()
    for score in scores:
        ahead.cancel(score)
    shut_readers()
