"""The default strategy (`transfer`) with its choices ranked by compiled code as well.

The earlier wrapper (code_rank.RankByCode) drew a few proposals from the inner strategy and
ran the one whose code looked best: it threw away the cost model's order, kept the others in
a reserve the model never saw again, and cost 27-62% more evaluations than `transfer` alone
(docs/search-priors.md). Here the cost model keeps its own ranking and the code's ranking
(`score`: tuner.product_rank.estimates, the instructions the compiled candidate is estimated
to run by its static profile (instructions per product where there is none), or any
order-preserving score such as tuner.code_rank.CodeRanker's predicted rank) is one of two
votes:

- **the model's plan**: the model ranks the fresh candidates as always; its best
  `shortlist x plan size` are compiled and scored, and the plan is the best of them by the
  sum of the two ranks (the model's and the code's), ties in the model's order. Candidates
  left out stay fresh: the next refit ranks them again with more data.
- **the random slots** (a fifth of the plan, and the fallback when the model has nothing to
  offer): each is the best-scored of `draws` random fresh points; the others stay fresh and
  are drawn again, before new ones, at the next random slot.

Every point is compiled and scored once (`scored` counts them).

The code votes only behind a gate (`ranking_on`), decided per space from evidence that the
score ranks this kernel: its fit on the kernel's other recorded spaces on the same target
(`kernel_fit`, tuner.product_rank.product_fit_among; two spaces at least, one space being
one shape) from the first plan, and from `gate_trials` trials on, its rank correlation on
this space's own measured trials. While the gate is shut the search is `transfer`, proposal
for proposal. With that fit (and only then: a correlation on a few trials says the code orders
the space, not that its top is the top), every other point of the initial design is the
code's best of a screen of random points.

On the seventeen recorded spaces (20 seeds) ranking by the static profile saved 43.2% of
the evaluations to `transfer`'s best on first tunes and 48.0% with priors, pooled (36-68% on
the M4's matmul_s8, 35-91% on its depthwise spaces; instructions per product had saved 5.7%
and 9.5% on eleven of them, a learnt forest had cost 18% and 13% more:
docs/code-ranking-live.md).
`edgetune replay --strategy transfer+code` runs it on recorded spaces, `edgetune tune` and
`model tune` live (edgetune.live_rank compiles the candidates); it is not the default.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .space import Config, Space
from .trial import Outcome, Trial
from .strategies.prior_trust import rank_agreement
from .strategies.transfer import TransferLearning

# Candidates compiled per plan slot, and random points per random slot: of (2, 4), (4, 8)
# and (8, 8), (4, 8) saved the most over the six spaces of bench/code_explore.py.
DEFAULT_SHORTLIST = 4
DEFAULT_DRAWS = 8
# The gate: the ranking has a say only while its scores rank this space's own measured trials
# with a rank correlation of at least GATE_RHO, judged from GATE_TRIALS trials on; until
# then, and whenever it drops below, the search is plain `transfer`, proposal for proposal.
# 0.8 lost less than 0.5 on conv2d_s8 (-11% against -19% over 20 seeds, bench/code_explore.py);
# on the recordings of today's kernels (2026-12-03, ten M55 and M4 spaces, 5 seeds) 0.9 lost
# less than 0.8: -7% against -8% pooled in first tunes, -0% against -5% with priors (the
# priors' subsets then seeded by their paths). With instructions per product as the score,
# 0.8 (and the kernel gate at 0.7) saved 6.0% pooled on first tunes against 12.3% for 0.9.
GATE_RHO = 0.9
GATE_TRIALS = 6
# Before that, the evidence is the score's fit on the kernel's other recorded spaces on the
# target (tuner.product_rank.product_fit_among), on MIN_SPACES of them at least: one space is
# one shape. At GATE_KERNEL_RHO or more the code has a say from the first plan and chooses
# design points from its screen (below). With the static profile as the score (2026-12-03,
# night) matmul_s8 passes it on both targets (M4 0.99, M55 0.998 since 2026-12-04), and since the
# recordings of 2026-12-04 (morning) conv2d_s8 and dwconv2d_s8 do (0.965-0.998); the figures that follow
# were measured with instructions per product, under which the M4's ranked at 0.74-0.77. Eleven recorded spaces, 20 seeds
# (bench/code_explore.py): 5.7% saved on first tunes and 9.5% with priors, pooled (ten
# spaces, before the third M4 matmul_s8 shape: 6.1% and 2.5%). Once the code has voted on
# that fit, keeping its say while the own trials rank at 0.3 rather than GATE_RHO: 5.6% and
# 9.6%, the same, so one threshold serves.
# Measured and not kept: a vote (without the screen) at a fit of 0.7, which let the M4's
# matmul_s8 (0.74-0.77) vote: 13.1% and 25.0% pooled on these replays, but the thresholds
# were chosen on them, and out of their sample it lost: the M4 shape recorded afterwards
# (m=4,n=24,k=48) 10-12% in its replays, a live M4 tune of a shape recorded nowhere
# (m=32,n=16,k=64) 26% over 8 seeds (bench/live_rank.py --target cortex-m4). On one space's
# fit, DS-CNN's convolutions (conv2d_s8's one M55 space: 0.82, a single 3x3 output pixel)
# took 49% more evaluations than `transfer` in `model tune` screened, 19% more voting
# without the screen (5 seeds; docs/code-ranking-live.md).
MIN_SPACES = 2
GATE_KERNEL_RHO = 0.8
# With that fit, every other point of the initial design is the code's best of a screen of
# DEFAULT_SCREEN random points (compiled once, run only if chosen), at most
# SCREEN_PER_EVALUATION per evaluation of a known budget (a 4-trial tune compiles 32). First
# tunes (bench/code_explore.py --first-tune): on the six M55 spaces of 2026-12-02 (matmul_s8
# v1; 5 seeds; -15% pooled without a screen) 32 points cost 44% more evaluations than
# `transfer`, 128 saved 28%, 256 saved 27%; every other design point from the screen saved
# 37%, all of them 27%. On today's ten spaces (10 seeds) the screen moved the pooled figure
# from -19.1% to -18.3% (docs/code-ranking-live.md). On the seventeen spaces with the
# static profile (2026-12-04, 20 seeds), 128 against 256: 36.5% against 43.2% saved pooled on
# first tunes, 48.3% against 48.0% with priors.
DEFAULT_SCREEN, SCREEN_PER_EVALUATION = 256, 8


@dataclass(frozen=True)
class KernelFit:
    """The evidence, before any trial, that the score ranks a kernel's code on a target
    (tuner.product_rank.product_fit_among): the lowest rank correlation over the kernel's
    other recorded spaces there, and how many there are (one space is one shape: the gate
    asks for MIN_SPACES)."""

    rho: float
    spaces: int

    def text(self) -> str:
        """`0.82 on 1 space`: how replay and the benchmarks print it."""
        return f"{self.rho:.2f} on {self.spaces} space{'' if self.spaces == 1 else 's'}"


@dataclass(frozen=True)
class CodeRankingUse:
    """What the code's ranking did in a search, for its summary."""
    kernel_fit: KernelFit | None  # the evidence before the first trial (None: none recorded)
    voted_from_start: bool  # kernel_fit reached GATE_KERNEL_RHO: the code had a say from the first plan
    voting_now: bool  # the gate as last decided
    compiled: int  # candidates compiled and scored, run or not


class CodeRankedTransfer(TransferLearning):
    """`transfer` whose plans and random proposals are chosen with the code's ranking.
    `score(config)`: lower is better, None where there is none (it did not compile, no
    features): such a point ranks behind every scored one. Ties keep the model's (or the
    draw's) order, so a seed reproduces the run as it does `transfer`'s. Without `score`
    nothing is ranked: the gate never opens and the search is `transfer`. `prefetch(configs)`,
    where given, is told the points about to be scored together, before they are (a live
    search compiles them side by side)."""

    name = "transfer+code"
    uses_code = True

    def __init__(self, space: Space, rng: np.random.Generator, objective: str = "", *,
                 score: Callable[[Config], float | None] | None = None, shortlist: int = DEFAULT_SHORTLIST,
                 draws: int = DEFAULT_DRAWS, gate: float | None = GATE_RHO, gate_trials: int = GATE_TRIALS,
                 kernel_fit: KernelFit | None = None, prefetch: Callable[[list[Config]], None] | None = None,
                 screen: int = DEFAULT_SCREEN, **options):
        if shortlist < 1 or draws < 1 or screen < 1:
            raise ValueError("shortlist, draws and screen must be at least 1")
        super().__init__(space, rng, objective, **options)
        self.score, self._shortlist, self.draws = score or _unscored, shortlist, draws
        self._prefetch = prefetch
        self.gate, self.gate_trials, self.kernel_fit = gate, gate_trials, kernel_fit
        self._own: list[tuple[int, float]] = []  # this space's told trials: (index, value; NaN failed)
        self._gate_at, self._open = -1, gate is None
        self._drawn: list[int] = []  # random fresh points drawn, not proposed yet, in draw order
        self._scores: dict[int, float] = {}  # by index: each point is compiled and scored once
        self.screen = screen_size(options.get("budget"), screen)
        self._screen: list[int] | None = None  # the screen's indices, drawn on first use
        # kept unused: each screen is drawn from a copy, the same order however often
        self._screen_rng, self._screen_cap = screen_stream(rng), screen
        self._design_points = 0  # design points chosen while the code chose them

    def scoring_with(self, score: Callable[[Config], float | None],
                     prefetch: Callable[[list[Config]], None] | None) -> "CodeRankedTransfer":
        """A copy of this search as it stands (its plan, its generator, what it was asked and
        told) whose scores come from `score` and `prefetch`: a caller looking ahead
        (edgetune.batch_ahead) asks the copy what this search would ask for next."""
        found = copy.deepcopy(self, {id(self.space): self.space, id(self.score): score})
        found._prefetch = prefetch
        return found

    def believed(self, configs: Sequence[Config]) -> list[Trial]:
        """Trials of `configs` (asked for, not measured yet) at the values their code
        predicts, without compiling anything: each one's score times the median ratio of
        measured value to score over this space's own trials (the score's unit need not be
        the objective's); the median of the results for one not scored yet, or before any
        trial was scored. [] before any result. A look-ahead tells a copy these in place of
        the trials in flight (edgetune.batch_ahead): told the median alone, the copy's next
        plan shared 49% of the real one's shortlist, told nothing 40%, told these 79%
        (matmul_s8 4x8x16 on the M55, 48 trials, 3 seeds)."""
        values = [v for v in self.results.values() if v is not None and np.isfinite(v)]
        if not values or not self.objective:
            return []
        ratios = [v / self._scores[i] for i, v in self._own
                  if np.isfinite(v) and np.isfinite(self._scores.get(i, np.inf)) and self._scores[i] > 0]
        scale, fallback = (float(np.median(ratios)) if ratios else None), float(np.median(values))
        trials = []
        for config in configs:
            score = self._scores.get(self.space.index_of(config), np.inf)
            value = scale * score if scale is not None and np.isfinite(score) and score > 0 else fallback
            trials.append(Trial(config, Outcome.OK, {self.objective: value}))
        return trials

    @property
    def scored(self) -> int:
        """Points compiled and scored so far."""
        return len(self._scores)

    def ranking_use(self) -> CodeRankingUse:
        """What the code's ranking has done so far (the gate as last decided: reading it
        here compiles nothing)."""
        return CodeRankingUse(self.kernel_fit, self.votes_from_start, self._open, self.scored)

    @property
    def votes_from_start(self) -> bool:
        """Whether the evidence before any trial (the fit on the kernel's other recorded
        spaces) lets the code vote from the first plan."""
        return votes_on_fit(self.kernel_fit)

    @property
    def scored_indices(self) -> frozenset[int]:
        return frozenset(self._scores)

    def _score_all(self, indices) -> None:
        """Score the points of `indices` not scored yet, telling `prefetch` of them first."""
        fresh = [i for i in dict.fromkeys(indices) if i not in self._scores]
        if self._prefetch is not None and len(fresh) > 1:
            self._prefetch([self.space.config_at(i) for i in fresh])
        for index in fresh:
            self._score_of(index)

    def _score_of(self, index: int) -> float:
        if index not in self._scores:
            value = self.score(self.space.config_at(index))
            self._scores[index] = np.inf if value is None else float(value)
        return self._scores[index]

    def _observe(self, index: int, value: float | None) -> None:
        super()._observe(index, value)
        if self.space.is_legal_index(index):
            self._own.append((index, np.nan if value is None else value))

    @property
    def ranking_on(self) -> bool:
        """Whether the code's ranking has a say now: before `gate_trials` trials, on the
        kernel's fit; then while its scores of the trials measured here rank them with a rank
        correlation of at least `gate` (each trial was compiled for its run, so scoring it
        compiles nothing more)."""
        if self.gate is None or self._gate_at == len(self._own):
            return self._open
        self._gate_at = len(self._own)
        if len(self._own) < self.gate_trials:
            self._open = self.votes_from_start
        else:
            self._score_all(i for i, _ in self._own)
            scores = np.array([self._score_of(i) for i, _ in self._own])
            finite = np.isfinite(scores)
            self._open = finite.sum() >= self.gate_trials and rank_agreement(
                scores[finite], np.array([v for (_, v), ok in zip(self._own, finite) if ok])) >= self.gate
        return self._open

    @property
    def shortlist(self) -> int:
        return self._shortlist if self.ranking_on else super().shortlist

    def _chosen(self, best_first: list[int], size: int) -> list[int]:
        if not self.ranking_on:
            return super()._chosen(best_first, size)
        self._score_all(best_first)
        code_rank = rank_positions([self._score_of(i) for i in best_first])
        votes = code_rank + np.arange(len(best_first))  # the model's rank is the position
        # The whole plan is voted on, though a model's layer reopened for a round of 4 trials
        # runs half of a plan of 8. Measured and not kept (DS-CNN model tunes, 2026-12-04):
        # voting only on what the budget has room for (4 of the best 16, the rest of the
        # plan unscored) compiled fewer candidates on the M4 (172-590 a run against
        # 275-776) and took 38% fewer evaluations than `transfer` there (5 seeds; 31% voting
        # on the plan), but 10% more on the M55 (3 seeds, each worse; 28% fewer voting on
        # the plan).
        # Not spread out as `transfer`'s first plan on a prior is: the code's vote parts a
        # guess from its neighbours already (spread after the vote, 20 seeds with priors:
        # +35.9% pooled against +35.2%, but +22.2% mean over spaces against +24.8%, the M55's
        # 6x5x16 depthwise space -86% against -19%).
        return [best_first[k] for k in np.argsort(votes, kind="stable")[:size]]

    @property
    def designs_by_code(self) -> bool:
        """Whether the code chooses design points now: only on the kernel's fit on several
        shapes, the evidence that the ranker picks this kernel's best code (one shape, or a
        rank correlation on a few trials of this space, says it orders a space, not that its
        top is the space's top)."""
        return self.votes_from_start and self.ranking_on

    def _space_filling(self, sample: int = 256) -> int | None:
        # Every other point of the design (and of a small budget's checks of its priors) is
        # the best-scored fresh point of the screen; the others keep the design's spread.
        if not self.designs_by_code:
            return super()._space_filling(sample)
        self._design_points += 1
        if self._design_points % 2 == 0:
            return super()._space_filling(sample)
        fresh = [i for i in self._screened() if self._is_fresh(i)]
        return min(fresh, key=self._score_of) if fresh else super()._space_filling(sample)

    def _screened(self) -> list[int]:
        """The screen: `screen` random legal points, compiled and scored once, on first use
        (the first of one order of the legal points: a larger screen extends a smaller one)."""
        if self._screen is None:
            self._screen = screen_points(self.space, copy.deepcopy(self._screen_rng), self.screen)
            self._score_all(self._screen)
        return self._screen

    def screen_ahead(self, budget: int) -> list[int]:
        """The screen a search of this space planning for `budget` evaluations would compile
        (the same seed's), while this one takes or took design points from it (the code
        designs from the start; a search opened again replays those with its own, larger,
        screen): a caller can compile them while trials run (edgetune.ahead). [] when the
        screen will not be asked for again."""
        # Measured and not kept (2026-12-05, DS-CNN on the M55 paced as a board, seed 0):
        # compiling ahead as well, once a layer's design was over, the candidates its model
        # would plan with at the end of its round (found on a copy of the search): 434 s to
        # `transfer`'s best against 429 s for the screens alone (460 s with nothing ahead),
        # and 260 more candidates compiled; the layer's next round plans again on more
        # trials and the other layers' priors, and shares few of them.
        if not self.votes_from_start or not (self.designing or self._design_points):
            return []
        return screen_points(self.space, copy.deepcopy(self._screen_rng), screen_size(budget, self._screen_cap))

    def _random_fresh(self) -> int | None:
        if not self.ranking_on:
            return super()._random_fresh()
        self._drawn = [i for i in self._drawn if i not in self._taken]
        while len(self._drawn) < self.draws:
            index = super()._random_fresh()
            if index is None:
                break
            self._drawn.append(index)
        if not self._drawn:
            return None
        self._score_all(self._drawn)
        best = min(range(len(self._drawn)), key=lambda k: (self._score_of(self._drawn[k]), k))
        return self._drawn.pop(best)


def votes_on_fit(fit: KernelFit | None) -> bool:
    """Whether a kernel's fit on its other recorded spaces lets the code vote from a
    search's first plan (and choose design points from its screen)."""
    return fit is not None and fit.spaces >= MIN_SPACES and fit.rho >= GATE_KERNEL_RHO


def screen_size(budget: int | None, screen: int = DEFAULT_SCREEN) -> int:
    """The points a search screens: `screen`, at most SCREEN_PER_EVALUATION per evaluation
    of a known budget."""
    return screen if budget is None else max(1, min(screen, SCREEN_PER_EVALUATION * budget))


def screen_points(space: Space, stream: np.random.Generator, size: int) -> list[int]:
    """The first `size` points of one random order of the legal points, drawn from
    `stream` (screen_stream of the search's generator). Every search of one seed draws
    the same order, so a search opened again with a larger budget (a model's layer at each
    of its rounds) screens the points it screened before and more, rather than a new draw
    compiled again, and a caller can know a screen before the search asks for it."""
    legal = space.legal_indices()
    return [int(legal[p]) for p in stream.permutation(len(legal))[:size]]


# The screen's stream, apart from the strategy's own (any fixed number would do).
_SCREEN_STREAM = 0x5C4EE7


def screen_stream(rng: np.random.Generator) -> np.random.Generator:
    """The screen's generator, derived from `rng`'s seed without drawing from `rng` (whose
    draws go on as `transfer`'s would): the same for every generator made from one seed."""
    seeds = getattr(rng.bit_generator, "seed_seq", None)
    if isinstance(seeds, np.random.SeedSequence):
        return np.random.default_rng(np.random.SeedSequence(seeds.entropy, spawn_key=(*seeds.spawn_key, _SCREEN_STREAM),
                                                            pool_size=seeds.pool_size))
    # a generator made from a bit generator's state has no seed sequence: seed from a copy
    return np.random.default_rng(copy.deepcopy(rng).integers(1 << 63))


def _unscored(config: Config) -> None:
    """No score for any point (a `transfer+code` made without a ranker): it ranks nothing."""
    return None


def rank_positions(scores: list[float]) -> np.ndarray:
    """Each score's rank among them (0 best), ties in list order."""
    order = np.argsort(np.asarray(scores, dtype=float), kind="stable")
    ranks = np.empty(len(order), dtype=float)
    ranks[order] = np.arange(len(order))
    return ranks
