"""Tuned matmul_s8 on this machine against the plain C loop at -O3, side by side.

For each shape: a short seeded random-search tune of matmul_s8 on `host` (fresh database;
the space holds plain C, AVX2 and AVX-512 variants where the CPU has them, both weight
layouts), then the plain triple loop (matmul_s8_naive.c.j2: no tiling, no intrinsics)
built by gcc -O3 with the host's flags (-march=native, so GCC may auto-vectorise it). Both
run on the workload's inputs through edgetune's host runner (median of 15 batches of at
least 2 ms, 64-byte aligned buffers); they are re-measured in alternation ROUNDS times and
the ratio plain / tuned is the median over the rounds. GOP/s = 2*M*N*K / time_ns (a MAC
counts as two operations). Then the best trial of each vector path and layout that the
search measured.

Last, dwconv2d_s8 (no plain-loop template): a seeded tune per shape, then the best plain C
variant and the best AVX2 variant the search found, re-measured in alternation ROUNDS
times; ratio = C / AVX2 (median of the rounds), GOP/s from 2 MACs per tap and channel.

Then the vector paths one against another, for matmul_s8 (--path-shapes) and conv2d_s8
(--conv-shapes: MLPerf Tiny layers of DS-CNN, MobileNetV1-0.25 and ResNet-8 by default): per
shape, one seeded random search per vector family the CPU offers (plain C, AVX2, AVX-512,
AVX-VNNI, AVX512-VNNI; the space restricted to that family, fresh database each), then the
plain loop (matmul_s8_naive.c.j2 / conv2d_s8_naive.c.j2) at gcc -O3 and the best variant of
each family, re-measured in alternation PATH_ROUNDS times on the same inputs. Printed: each
family's median time, plain loop / best variant of each family, and VNNI = the fastest
non-VNNI AVX family / the fastest VNNI family (each ratio the median over the rounds of the
paired times). A second line ("fastest") does the same with each measurement's fastest
batch instead of its median: on a shared, loaded machine the fastest batch is the one least
disturbed by other jobs. GOP/s from 2 MACs (matmul M*N*K; conv oh*ow*cout*kh*kw*cin, padded
taps count), at the median time.

usage: .venv/bin/python bench/host_int8.py [--budget N] [--seed S] [--shapes m=..,n=..,k=.. ...]
                                           [--dw-shapes h=..,w=..,c=..,... ...]
                                           [--path-budget N] [--path-shapes m=..,n=..,k=.. ...]
                                           [--conv-budget N] [--conv-shapes h=..,w=..,cin=..,... ...]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from kernels import plain_loop  # noqa: E402  (bench/kernels.py: the plain loop through the measuring pipeline)
from restricted import one_vector_path  # noqa: E402  (bench/restricted.py)

from edgetune.codegen import get_kernel  # noqa: E402
from edgetune.codegen.kernels.convolution import geometry_of  # noqa: E402
from edgetune.evaluate import Evaluator  # noqa: E402
from edgetune.session import TuneRequest, tune, workload_inputs  # noqa: E402
from edgetune.targets import get_target  # noqa: E402
from edgetune.tuner import TuningDatabase  # noqa: E402

DEFAULT_SHAPES = ["m=64,n=64,k=64", "m=128,n=256,k=512", "m=1,n=1024,k=1024", "m=49,n=96,k=288"]
DEFAULT_DW_SHAPES = ["h=32,w=32,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1",
                     "h=14,w=14,c=144,kh=3,kw=3,stride=2,pad=1,dilation=1"]
DEFAULT_PATH_SHAPES = ["m=64,n=64,k=64", "m=256,n=256,k=256", "m=49,n=96,k=288"]
# MLPerf Tiny (Banbury et al., 2021) convolution layers: DS-CNN's first layer and its 1x1
# 64->64, a MobileNetV1-0.25 1x1 at 6x6x128, ResNet-8's 3x3 16->16 at 32x32 and 64->64 at 8x8.
DEFAULT_CONV_SHAPES = ["h=49,w=10,cin=1,cout=64,kh=10,kw=4,stride=2,pad=1,dilation=1",
                       "h=25,w=5,cin=64,cout=64,kh=1,kw=1,stride=1,pad=0,dilation=1",
                       "h=6,w=6,cin=128,cout=128,kh=1,kw=1,stride=1,pad=0,dilation=1",
                       "h=32,w=32,cin=16,cout=16,kh=3,kw=3,stride=1,pad=1,dilation=1",
                       "h=8,w=8,cin=64,cout=64,kh=3,kw=3,stride=1,pad=1,dilation=1"]
VNNI = ("avxvnni", "avx512vnni")
ROUNDS = 5
PATH_ROUNDS = 7  # the family comparison: more rounds, the machine is shared


def gops(shape: dict, time_ns: float) -> float:
    return 2.0 * shape["m"] * shape["n"] * shape["k"] / time_ns


def timed(evaluate, config, what: str) -> float:
    trial = evaluate(config)
    if trial.outcome.failed:
        raise SystemExit(f"{what} failed: {trial.outcome.value}: {trial.error}")
    return trial.values["time_ns"]


def best_per_path(db, workload) -> dict:
    """The fastest successful trial of each (vector path, layout) in the database."""
    best = {}
    for trial in db.trials(workload):
        if trial.outcome.failed:
            continue
        key = (trial.config["vector"], trial.config["layout"])
        if key not in best or trial.values["time_ns"] < best[key].values["time_ns"]:
            best[key] = trial
    return dict(sorted(best.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=40, help="trials per shape (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="parallel builds (timed runs never overlap)")
    parser.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES)
    parser.add_argument("--dw-shapes", nargs="*", default=DEFAULT_DW_SHAPES)
    parser.add_argument("--path-budget", type=int, default=24, help="matmul_s8 trials per shape and vector family")
    parser.add_argument("--path-shapes", nargs="*", default=DEFAULT_PATH_SHAPES)
    parser.add_argument("--conv-budget", type=int, default=24, help="conv2d_s8 trials per shape and vector family")
    parser.add_argument("--conv-shapes", nargs="*", default=DEFAULT_CONV_SHAPES)
    args = parser.parse_args()

    kernel, target = get_kernel("matmul_s8"), get_target("host")
    print(f"matmul_s8 on {target.name} ({target.core.name}; vector units: "
          f"{', '.join(u.name for u in target.vector_units)}); random search, budget {args.budget}, seed {args.seed}")
    print(f"{'shape':>18} {'plain -O3 us':>12} {'tuned us':>9} {'ratio':>6} {'plain GOP/s':>11} {'tuned GOP/s':>11}"
          "  best configuration")
    per_path = []
    with tempfile.TemporaryDirectory() as tmp:
        db = TuningDatabase(Path(tmp) / "bench.db")
        for shape_text in args.shapes:
            shape = kernel.parse_shape(shape_text)
            summary = tune(TuneRequest(kernel, target, shape, "random", args.budget, args.jobs, args.seed), db)
            if summary.best is None:
                raise SystemExit(f"{shape_text}: no successful trial ({summary.failures})")
            best = summary.best.trial.config
            space = kernel.space(target, shape)
            inputs = workload_inputs(kernel, summary.workload)
            tuned_eval = Evaluator(kernel, target, shape, space, inputs, Path(tmp))
            plain, tuned = [], []
            for _ in range(ROUNDS):
                plain.append(timed(lambda _: plain_loop(kernel, target, shape, inputs, Path(tmp)), best, "plain loop"))
                tuned.append(timed(tuned_eval, best, "tuned variant"))
            ratio = statistics.median(p / t for p, t in zip(plain, tuned))
            plain_ns, tuned_ns = statistics.median(plain), statistics.median(tuned)
            print(f"{shape_text:>18} {plain_ns / 1e3:>12.1f} {tuned_ns / 1e3:>9.1f} {ratio:>6.2f} "
                  f"{gops(shape, plain_ns):>11.1f} {gops(shape, tuned_ns):>11.1f}  {best.key()}", flush=True)
            per_path.append((shape_text, shape, best_per_path(db, summary.workload)))
    print("\nbest trial of each vector path and layout found by the search (GOP/s, from the tuning run)")
    for shape_text, shape, best in per_path:
        cells = "  ".join(f"{vector}/{layout} {gops(shape, trial.values['time_ns']):6.1f}"
                          for (vector, layout), trial in best.items())
        print(f"{shape_text:>18}  {cells}")
    if args.dw_shapes:
        depthwise(args)
    if args.path_shapes:
        paths_against_each_other(args, "matmul_s8", args.path_shapes, args.path_budget)
    if args.conv_shapes:
        paths_against_each_other(args, "conv2d_s8", args.conv_shapes, args.conv_budget)


def depthwise(args) -> None:
    kernel, target = get_kernel("dwconv2d_s8"), get_target("host")
    print(f"\ndwconv2d_s8 on {target.name}: best plain C vs best AVX2 variant of a random search, budget "
          f"{args.budget}, seed {args.seed}")
    print(f"{'shape':>52} {'C us':>8} {'AVX2 us':>8} {'ratio':>6} {'C GOP/s':>8} {'AVX2 GOP/s':>10}  best AVX2 configuration")
    with tempfile.TemporaryDirectory() as tmp:
        db = TuningDatabase(Path(tmp) / "bench.db")
        for shape_text in args.dw_shapes:
            shape = kernel.parse_shape(shape_text)
            summary = tune(TuneRequest(kernel, target, shape, "random", args.budget, args.jobs, args.seed), db)
            best = {}
            for trial in db.trials(summary.workload):
                vector = trial.config["vector"]
                if not trial.outcome.failed and (vector not in best
                                                 or trial.values["time_ns"] < best[vector].values["time_ns"]):
                    best[vector] = trial
            if not {"c", "avx2"} <= set(best):
                print(f"{shape_text:>52}  the search measured no successful {' and '.join({'c', 'avx2'} - set(best))} variant")
                continue
            evaluate = Evaluator(kernel, target, shape, kernel.space(target, shape),
                                 workload_inputs(kernel, summary.workload), Path(tmp))
            plain, vector = [], []
            for _ in range(ROUNDS):
                plain.append(timed(evaluate, best["c"].config, "plain C variant"))
                vector.append(timed(evaluate, best["avx2"].config, "AVX2 variant"))
            ratio = statistics.median(p / v for p, v in zip(plain, vector))
            ops = 2 * kernel_outputs(shape) * shape["kh"] * shape["kw"]
            plain_ns, vector_ns = statistics.median(plain), statistics.median(vector)
            print(f"{shape_text:>52} {plain_ns / 1e3:>8.1f} {vector_ns / 1e3:>8.1f} {ratio:>6.2f} {ops / plain_ns:>8.1f} "
                  f"{ops / vector_ns:>10.1f}  {best['avx2'].config.key()}", flush=True)


def best_of_each_family(args, kernel, target, shape, families, budget, tmp):
    """One seeded random search per vector family: {family: best configuration}, and the workload."""
    best, workload = {}, None
    for number, vector in enumerate(families):
        db = TuningDatabase(Path(tmp) / f"{kernel.name}-{number}.db")
        summary = tune(TuneRequest(one_vector_path(kernel, vector), target, shape, "random", budget,
                                   args.jobs, args.seed), db)
        if summary.best is None:
            raise SystemExit(f"{shape}: no successful {vector} trial ({summary.failures})")
        best[vector], workload = summary.best.trial.config, summary.workload
    return best, workload


def paired_ratio(times: dict, slow: str, fast: str) -> float:
    return statistics.median(s / f for s, f in zip(times[slow], times[fast]))


def batch_times(evaluate, config, what: str) -> tuple[float, float]:
    """(median, fastest) per-call time of one measurement's batches."""
    trial = evaluate(config)
    if trial.outcome.failed:
        raise SystemExit(f"{what} failed: {trial.outcome.value}: {trial.error}")
    return trial.values["time_ns"], trial.values["time_ns_min"]


def ratio_cells(times: dict, families: list[str], avx: list[str], vnni: list[str]) -> str:
    """Each family's median time, plain / each family, best non-VNNI AVX / best VNNI."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    cells = "".join(f" {medians[name] / 1e3:>12.2f}" for name in times)
    cells += "".join(f" {paired_ratio(times, 'plain', name):>12.2f}" for name in families)
    if avx and vnni:
        return cells + f" {paired_ratio(times, min(avx, key=medians.get), min(vnni, key=medians.get)):>5.2f}"
    return cells + f" {'-':>5}"


def operations(kernel_name: str, shape: dict) -> int:
    """2 * MACs of one call (a MAC counts as two operations)."""
    if kernel_name == "matmul_s8":
        return 2 * shape["m"] * shape["n"] * shape["k"]
    geo = geometry_of(shape)
    return 2 * geo.oh * geo.ow * shape["cout"] * shape["kh"] * shape["kw"] * shape["cin"]


def paths_against_each_other(args, kernel_name: str, shape_texts: list[str], budget: int) -> None:
    kernel, target = get_kernel(kernel_name), get_target("host")
    families = list(kernel.space(target, kernel.parse_shape(shape_texts[0])).param("vector").values)
    avx = [v for v in families if v != "c" and v not in VNNI]
    vnni = [v for v in families if v in VNNI]
    print(f"\n{kernel_name} on {target.name}: plain loop (gcc -O3) vs the best variant of a random search per vector "
          f"family ({', '.join(families)}), budget {budget} each, seed {args.seed}; times in us, re-measured in "
          f"alternation {PATH_ROUNDS} times; plain/X = plain loop / best X, VNNI = best {'/'.join(avx) or '-'} / best VNNI")
    header = "".join(f" {name + ' us':>12}" for name in ("plain", *families))
    ratios = "".join(f" {'plain/' + name:>12}" for name in families)
    print(f"{'':>9} {'shape':>52}{header}{ratios} {'VNNI':>5} {'GOP/s':>6}  fastest configuration")
    with tempfile.TemporaryDirectory() as tmp:
        for shape_text in shape_texts:
            shape = kernel.parse_shape(shape_text)
            best, workload = best_of_each_family(args, kernel, target, shape, families, budget, tmp)
            space = kernel.tuning_space(target, shape)
            inputs = workload_inputs(kernel, workload)
            evaluate = Evaluator(kernel, target, shape, space, inputs, Path(tmp))
            def plain_eval(_config):
                return plain_loop(kernel, target, shape, inputs, Path(tmp))  # no configuration: the plain loop
            medians = {name: [] for name in ("plain", *families)}
            fastest = {name: [] for name in ("plain", *families)}
            for _ in range(PATH_ROUNDS):
                for name in ("plain", *families):
                    median, least = batch_times(plain_eval if name == "plain" else evaluate,
                                                best["c" if name == "plain" else name], f"{name} variant")
                    medians[name].append(median)
                    fastest[name].append(least)
            winner = min(families, key=lambda name: statistics.median(medians[name]))
            ops = operations(kernel_name, shape) / statistics.median(medians[winner])
            print(f"{'median':>9} {shape_text:>52}{ratio_cells(medians, families, avx, vnni)} {ops:>6.1f}  "
                  f"{best[winner].key()}", flush=True)
            print(f"{'fastest':>9} {'':>52}{ratio_cells(fastest, families, avx, vnni)}", flush=True)
            for vector in families:
                if vector != winner:
                    print(f"{'':>62}  best {vector}: {best[vector].key()}")


def kernel_outputs(shape: dict) -> int:
    """Output elements of a depthwise convolution (oh * ow * c * mult)."""
    geo = geometry_of(shape)
    return geo.oh * geo.ow * shape["c"] * shape["mult"]


if __name__ == "__main__":
    main()
