"""Does `transfer+code` pay in a live tune? Evaluations and wall time to `transfer`'s best.

In the same run, per workload and seed, each in a fresh database and a fresh build cache:
- `transfer` (the default) tunes for --budget trials; its best, and the trials it took to
  first reach it, are noted;
- `transfer+code` (edgetune.live_rank: the candidates compiled, their code ranked by its
  estimated cost (tuner.product_rank.estimates: the static profile on T32 code), the gate's first evidence taken from the recorded spaces shipped
  with edgetune, a space of the very workload left out; CodeRankedTransfer voting behind its
  gate) tunes with the same seed, planning
  for the same budget, and goes on past it (--step trials at a time, the search kept open)
  until it reaches that best or --cap x the budget (a miss counts the cap).
Kernels: one LiveSearch each (edgetune.session, as `edgetune tune` runs it). Models: the
library's tune_model (as `edgetune model tune`), the best being the model's total (sum over
layers of occurrences x best); a model run that has not reached `transfer`'s total is run
again with --step more trials on the same database (a run with a smaller budget makes the
same choices as the first rounds of a larger one: bench/model_budget.py).

Wall time: QEMU as measured here (from the search's opening to the trial, or round, that
reached the best; the gate's evidence is computed before the clock starts and its one-off
cost printed apart), and a serial board modelled as: per trial --board-overhead seconds
(flash, reset, session: 3 s assumed, the project has no board to time), the trial's build
(its compile and link as the trial timed them) and the `an547-serial` target's runs per
trial of its instructions at the target's clock; plus, for `transfer+code`, the host's wall
time the search waited on candidates' scores (waits side by side counted once: the board
idles meanwhile). On a board a model tune would also compile ahead, while trials run, the
layers' screens and the next round's opening (edgetune.ahead, edgetune.search_ahead); on the
emulator it does not (its trials take the host's cores), so the model charges those
compiles as waits: pessimistic for a board. The trials it runs were compiled to be ranked,
so their builds find the objects in the cache.

--pace-board measures that board's wall time instead of modelling it: after its build and
its QEMU run, each trial holds the one board (a lock) asleep for --board-overhead seconds
plus its runs at the clock, the host's cores free meanwhile as while a board flashes and
runs, and the tune compiles ahead as it does on a board (edgetune.live_rank.AHEAD_RUNNERS);
the QEMU column is then that paced time, the board column the model beside it.

usage: .venv/bin/python bench/live_rank.py [--seeds N] [--first-seed S] [--budget B] [--model-budget B] [--cap C]
                                           [--kernels NAME ...] [--models NAME ...] [--jobs J] [--target T]
                                           [--board-overhead S] [--pace-board]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edgetune import live_rank
from edgetune.codegen import get_kernel
from edgetune.evaluate import Evaluator
from edgetune.model import load_model
from edgetune.model.session import distinct_workloads, tune_model
from edgetune.session import LiveSearch, TuneRequest
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase

HERE = Path(__file__).resolve().parent
MODELS = HERE.parent / "tests" / "data" / "models"
TARGET = "cortex-m55"  # the default --target
BOARD_TARGET = "an547-serial"  # the serial board whose runs per trial model a board's timing
KERNELS = {
    "matmul_s8 m16n16k32": ("matmul_s8", "m=16,n=16,k=32"),
    "dwconv2d_s8 ds-cnn": ("dwconv2d_s8", "h=25,w=5,c=64,mult=1,kh=3,kw=3,stride=1,dilation=1,pad=same"),
    "fir_q15 t32b64": ("fir_q15", "taps=32,block=64,rounding=nearest"),
    "conv2d_s8 8x8x16": ("conv2d_s8", "h=8,w=8,cin=16,cout=16,kh=3,kw=3,stride=1,dilation=1,pad=same"),
    "matmul_s8 m32n16k64": ("matmul_s8", "m=32,n=16,k=64"),  # a shape recorded nowhere
}


@dataclass(frozen=True)
class Run:
    evaluations: int  # to reach the reference best (the cap where it never did)
    reached: bool
    best: float
    seconds: float  # QEMU wall time to that evaluation (or round)
    instructions: float  # summed over the trials to that evaluation
    compiled: int  # configurations compiled (transfer: one per trial; +code: its scorer's, run or not)
    scoring_s: float  # wall seconds the search waited on candidates' scores (+code; side by side once)
    build_s: float  # mean seconds a trial's own build took (compile and link, as the trials timed them)


class Clock:
    """Completion time of each stored trial, by configuration key."""

    def __init__(self):
        self.start, self.done = time.monotonic(), {}

    def __call__(self, stored, budget, trial) -> None:
        self.done.setdefault(trial.config.key(), time.monotonic() - self.start)


def fresh_cache(root: Path, name: str) -> None:
    os.environ["EDGETUNE_CACHE"] = str(root / f"cache-{name}")  # read at every build


def kernel_run(kernel_name: str, shape_text: str, strategy: str, seed: int, budget: int, limit: int, step: int,
               reference: float | None, jobs: int, root: Path, target_name: str = TARGET,
               batch_ahead: bool = True) -> Run:
    kernel, target = get_kernel(kernel_name), get_target(target_name)
    shape = kernel.parse_shape(shape_text)
    fresh_cache(root, f"{kernel_name}-{strategy}-{seed}")
    live_rank.forget_scores()
    db = TuningDatabase(root / f"{kernel_name}-{strategy}-{seed}.db")
    clock = Clock()
    request = TuneRequest(kernel, target, shape, strategy, budget, jobs, seed)
    with LiveSearch(request, db, clock, plan=budget) as search:
        look_ahead = search.batch_look_ahead() if batch_ahead else None  # as `edgetune tune` does
        done = budget
        search.run(done, look_ahead)
        while reference is not None and best_of(db, search) > reference and done < limit:
            done = min(limit, done + step)
            search.run(done, look_ahead)
        live_rank.stop_ahead(search.workload.key())
        trials = [r.trial for r in db.proposals(search.workload)]
    values = [t.value("instructions") for t in trials]
    best = min(v for v in values if v is not None)
    goal = best if reference is None else reference
    hit = next((n for n, v in enumerate(values) if v is not None and v <= goal), None)
    upto = trials[:len(trials) if hit is None else hit + 1]
    seconds = clock.done[upto[-1].config.key()]
    compiled, scoring = compiles_until(clock.start + seconds, {(search.workload.key(), t.config.key()) for t in upto})
    return Run(limit if hit is None else hit + 1, hit is not None, best, seconds,
               sum(t.value("instructions") or 0.0 for t in upto), compiled, scoring, build_seconds(upto))


def compiles_until(moment: float, run: set[str]) -> tuple[int, float]:
    """(configurations compiled by the time `moment`: the trials run so far, and those the
    live scores compiled then, ahead or not; the wall seconds the search waited on scores
    until then, waits side by side counted once: compiles done ahead while trials ran are
    not among them)."""
    scores = live_rank.scores_made()
    ranked = {(s.workload_key, key) for s in scores for key, at in s.compiled_at.items() if at <= moment}
    return len(run | ranked), union_seconds([(a, min(b, moment)) for s in scores for a, b in s.waited if a < moment])


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def build_seconds(trials) -> float:
    """Mean seconds of the trials' own builds (compile and link, as each trial timed its own)."""
    times = [float(t.info.get("seconds_compile", 0.0)) + float(t.info.get("seconds_link", 0.0)) for t in trials]
    return sum(times) / max(1, len(times))


def best_of(db: TuningDatabase, search: LiveSearch) -> float:
    return min((v for r in db.proposals(search.workload) if (v := r.trial.value("instructions")) is not None),
               default=float("inf"))


def model_run(name: str, strategy: str, seed: int, budget: int, limit: int, step: int, reference: float | None,
              jobs: int, root: Path, target_name: str = TARGET) -> Run:
    model, target = load_model(MODELS / f"{name}.tflite"), get_target(target_name)
    fresh_cache(root, f"{name}-{strategy}-{seed}")
    live_rank.forget_scores()
    db = TuningDatabase(root / f"{name}-{strategy}-{seed}.db")
    rounds: dict[int, tuple] = {}  # round number -> (trials spent, total, seconds when first heard of)
    start = time.monotonic()
    clock = Clock()

    def heard(state) -> None:
        # A call with a larger budget replays the earlier rounds first: their first time counts.
        rounds.setdefault(state.number, (state.spent, state.total, time.monotonic() - start))

    done = budget
    while True:
        tune_model(model.layers, target, db, budget=done, strategy=strategy, seed=seed, jobs=jobs, progress=heard,
                   trial_progress=clock)
        final = rounds[max(rounds)][1]
        if reference is None or final <= reference or done >= limit:
            break
        done = min(limit, done + step)
    goal = final if reference is None else reference
    ordered = [rounds[n] for n in sorted(rounds)]
    hit = next(((spent, seconds) for spent, total, seconds in ordered if total is not None and total <= goal), None)
    spent, seconds = hit if hit is not None else (limit, ordered[-1][2])
    workloads = [lw.workload for lw in distinct_workloads(model.layers, target)]
    records = sorted((r for w in workloads for r in db.proposals(w)), key=lambda r: r.id)[:spent]
    compiled, scoring = compiles_until(start + seconds, {(r.workload.key(), r.trial.config.key()) for r in records})
    return Run(spent, hit is not None, final, seconds, sum(r.trial.value("instructions") or 0.0 for r in records),
               compiled, scoring, build_seconds([r.trial for r in records]))


def timed_compile(kernel_name: str, shape: dict, root: Path, count: int = 4, target_name: str = TARGET) -> float:
    """Mean seconds to compile and read one variant (empty cache), over `count` spread configurations."""
    from edgetune.targets.code_features import variant_features
    from edgetune.targets.runners import runner_for

    kernel, target = get_kernel(kernel_name), get_target(target_name)
    fresh_cache(root, f"timing-{kernel_name}")
    space = kernel.tuning_space(target, shape)
    legal = space.legal_indices()
    picks = [space.config_at(int(legal[int(i * (len(legal) - 1) / max(1, count - 1))])) for i in range(count)]
    started = time.perf_counter()
    for n, config in enumerate(picks):
        variant_features(runner_for(target), kernel, shape, config, root / f"timing-{kernel_name}-{n}")
    return (time.perf_counter() - started) / count


class PacedBoard:
    """One serial board on the emulator: each trial, after its build and QEMU run, holds
    the board asleep for the overhead plus its runs at the clock (see the module)."""

    def __init__(self, overhead_s: float, runs: int, clock_hz: float):
        self.overhead_s, self.runs, self.clock_hz = overhead_s, runs, clock_hz
        self.board = threading.Lock()

    def hold(self, trials) -> None:
        seconds = sum(self.overhead_s + self.runs * (t.value("instructions") or 0.0) / self.clock_hz for t in trials)
        with self.board:
            time.sleep(seconds)

    def install(self) -> None:
        """Every Evaluator of this process paces its trials."""
        alone, batch = Evaluator.__call__, Evaluator.evaluate_batch

        def paced_alone(evaluator, config):
            trial = alone(evaluator, config)
            self.hold([trial])
            return trial

        def paced_batch(evaluator, configs):
            trials = batch(evaluator, configs)
            self.hold(trials)
            return trials

        Evaluator.__call__, Evaluator.evaluate_batch = paced_alone, paced_batch


def fit_text(fit) -> str:
    """A gate's evidence (tuner.code_explore.KernelFit), or none."""
    return "none" if fit is None else fit.text()


def board_seconds(run: Run, overhead_s: float, runs: int, clock_hz: float) -> float:
    """A serial board's wall time for the run: per trial the overhead, its build and its runs
    at the board's clock, plus the host's wall time the search waited on scores (the board idles)."""
    return run.evaluations * (overhead_s + run.build_s) + runs * run.instructions / clock_hz + run.scoring_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0, help="Seeds run from this one on [0].")
    parser.add_argument("--budget", type=int, default=32, help="Trials of a kernel's transfer run [32].")
    parser.add_argument("--model-budget", type=int, default=128, help="Trials of a model's transfer run [128].")
    parser.add_argument("--cap", type=float, default=2.0, help="transfer+code stops at this many times the budget.")
    parser.add_argument("--step", type=int, default=8, help="Trials added at a time past the budget (models: x4).")
    parser.add_argument("--kernels", nargs="*", default=list(KERNELS)[:3], choices=list(KERNELS))
    parser.add_argument("--models", nargs="*", default=["ds_cnn_kws"])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--board-overhead", type=float, default=3.0)
    parser.add_argument("--pace-board", action="store_true", help="Measure the board's time (trials paced) "
                                                                       "rather than model it.")
    parser.add_argument("--no-batch-ahead", action="store_true", help="Kernels on a paced board: compile nothing "
                        "ahead beside a batch (edgetune.batch_ahead), to measure what it saves.")
    parser.add_argument("--target", default=TARGET, help=f"The emulated target tuned [{TARGET}]; a board of its clock "
                                                        f"is modelled with {BOARD_TARGET}'s runs per trial.")
    args = parser.parse_args()
    runs_per_trial, clock_hz = get_target(BOARD_TARGET).serial.runs, get_target(args.target).core.clock_hz
    wall = "paced s" if args.pace_board else "QEMU s"
    if args.pace_board:
        PacedBoard(args.board_overhead, runs_per_trial, clock_hz).install()
        live_rank.AHEAD_RUNNERS.add(get_target(args.target).runner.kind)  # the paced emulator stands for a board
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgetune-live-rank-") as tmp:
        root = Path(tmp)
        fresh_cache(root, "ranker")
        print(f"# {args.target}, {'QEMU paced as a board' if args.pace_board else 'QEMU'}; {args.seeds} seeds; kernels at a budget of {args.budget}, models {args.model_budget};"
              f" transfer+code until transfer's best or {args.cap:g} x the budget; jobs {args.jobs}", flush=True)
        work = [(label, "kernel") for label in args.kernels] + [(name, "model") for name in args.models]
        for label, kind in work:
            if kind == "kernel":
                kernel_name, shape_text = KERNELS[label]
                kernel = get_kernel(kernel_name)
                shape = kernel.parse_shape(shape_text)
                started = time.monotonic()
                ranker = live_rank.live_ranker(kernel_name, args.target, shape)
                learnt = time.monotonic() - started
                timed = timed_compile(kernel_name, shape, root, target_name=args.target)
                note = (f"ranked by the code estimate; left out: "
                        f"{', '.join(ranker.left_out) or 'none'}; kernel fit {fit_text(ranker.kernel_fit)}; "
                        f"{learnt:.1f} s once; a compile and read {timed:.2f} s")
            else:
                started = time.monotonic()
                model = load_model(MODELS / f"{label}.tflite")
                learnt = [live_rank.live_ranker(lw.kernel.name, args.target, lw.shape)
                          for lw in distinct_workloads(model.layers, get_target(args.target))]
                note = (f"{len(learnt)} workloads' gate evidence in {time.monotonic() - started:.1f} s once; left out: "
                        f"{', '.join(sorted({n for r in learnt for n in r.left_out})) or 'none'}; kernel fits "
                        f"{', '.join(sorted({fit_text(r.kernel_fit) for r in learnt}))}")
            print(f"\n## {label}: {note}", flush=True)
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                if kind == "kernel":
                    plain = kernel_run(kernel_name, shape_text, "transfer", seed, args.budget, args.budget, args.step,
                                       None, args.jobs, root, args.target)
                    limit = int(args.cap * args.budget)
                    ranked = kernel_run(kernel_name, shape_text, "transfer+code", seed, args.budget, limit,
                                        args.step, plain.best, args.jobs, root, args.target, not args.no_batch_ahead)
                else:
                    plain = model_run(label, "transfer", seed, args.model_budget, args.model_budget, 0, None,
                                      args.jobs, root, args.target)
                    limit = int(args.cap * args.model_budget)
                    ranked = model_run(label, "transfer+code", seed, args.model_budget, limit, 4 * args.step,
                                       plain.best, args.jobs, root, args.target)
                rows.append((label, seed, plain, ranked))
                boards = [board_seconds(r, args.board_overhead, runs_per_trial, clock_hz) for r in (plain, ranked)]
                print(f"seed {seed}: best {'none' if plain.best is None else f'{plain.best:,.0f}'}; evaluations transfer {plain.evaluations}, "
                      f"+code {ranked.evaluations}{'' if ranked.reached else ' (not reached)'} "
                      f"({1 - ranked.evaluations / plain.evaluations:+.0%}); {wall} {plain.seconds:.1f} / "
                      f"{ranked.seconds:.1f} ({1 - ranked.seconds / plain.seconds:+.0%}); compiled {plain.compiled} / "
                      f"{ranked.compiled} (ranking {ranked.scoring_s:.0f} s; builds {plain.build_s:.2f} / "
                      f"{ranked.build_s:.2f} s a trial); board s {boards[0]:.0f} / {boards[1]:.0f} "
                      f"({1 - boards[1] / boards[0]:+.0%})", flush=True)
    print(f"\n# summed over seeds: evaluations, {wall[:-2]} seconds, board seconds (modelled); saved = 1 - (+code)/(transfer)")
    print(f"{'workload':<22}{'transfer':>9}{'+code':>7}{'saved':>7}{wall:>8}{'+code':>7}{'saved':>7}"
          f"{'board s':>9}{'+code':>7}{'saved':>7}{'reached':>8}")
    for label in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == label]
        e = (sum(r[2].evaluations for r in mine), sum(r[3].evaluations for r in mine))
        q = (sum(r[2].seconds for r in mine), sum(r[3].seconds for r in mine))
        b = (sum(board_seconds(r[2], args.board_overhead, runs_per_trial, clock_hz) for r in mine),
             sum(board_seconds(r[3], args.board_overhead, runs_per_trial, clock_hz) for r in mine))
        print(f"{label:<22}{e[0]:>9}{e[1]:>7}{1 - e[1] / e[0]:>+7.0%}{q[0]:>8.0f}{q[1]:>7.0f}{1 - q[1] / q[0]:>+7.0%}"
              f"{b[0]:>9.0f}{b[1]:>7.0f}{1 - b[1] / b[0]:>+7.0%}{sum(r[3].reached for r in mine):>5}/{len(mine)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
