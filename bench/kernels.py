"""The kernels on the Cortex-M55 (QEMU): each operator of issue 19 tuned and set beside the plain
C loop, then the MLPerf Tiny models' layer shapes.

1. Operators (`--budget`, default 60 trials each, `--strategy`, default the project's): for
   matmul_s8 64^3, conv 3x3 (16x16x32 -> 32), depthwise 3x3 (16x16x32), matmul_f32 32^3,
   fir_f32 (32 taps, 64 samples), fully connected 512 -> 128 (matmul_s8 with m=1) and fir_q15
   (32 taps, 256 samples, truncating like CMSIS-DSP): a seeded tune by estimated cycles in a
   fresh database; its best trial by instructions and its best by estimated cycles; MACs per
   estimated cycle next to the M55's limit for the data type (Helium is dual-beat: 64 bits of
   lanes per cycle, 8 int8, 4 int16 or 2 fp32 MACs: the HAL's int8 figure scaled by the lanes);
   the plain loop (the kernel's naive template, or the FIR's one-output C variant) at GCC -O3
   on the same inputs as a ratio plain / tuned; and for fir_q15, CMSIS-DSP's arm_fir_q15
   measured in the same run (bench/cmsis_fir.py) as tuned / library. Counts are exact QEMU
   instruction counts; cycles are the target's cost model (edgetune.hal.cost).
2. Layers (`--layer-budget`, default 8 trials per distinct workload; `--no-layers` skips):
   every distinct tuned workload of DS-CNN, MobileNetV1-0.25 and ResNet-8
   (tests/data/models/, read with edgetune.codegen.model.load_model), tuned by cycles; MACs
   per estimated cycle per workload, and per kernel the worst, the median and the best.

With `--shapes m=..,n=..,k=.. ...`: the older matmul_s8 table only (a random-search tune per
shape against the plain loop at -O3 and at -O3 without auto-vectorisation, MACs per executed
instruction, and the best of each weight layout).

usage: .venv/bin/python bench/kernels.py [--budget N] [--layer-budget N] [--no-layers] [--seed S]
                                         [--strategy NAME] [--shapes m=..,n=..,k=.. ...]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from cmsis_fir import library_fir  # noqa: E402  (bench/cmsis_fir.py: arm_fir_q15 built and measured)

from edgetune.codegen import get_kernel  # noqa: E402
from edgetune.codegen.kernels.convolution import geometry_of  # noqa: E402
from edgetune.codegen.model import load_model  # noqa: E402
from edgetune.evaluate import Evaluator, measure_source  # noqa: E402
from edgetune.session import TuneRequest, tune, workload_inputs  # noqa: E402
from edgetune.targets import get_target  # noqa: E402
from edgetune.tuner import TuningDatabase  # noqa: E402
from edgetune.tuner.strategies import DEFAULT_STRATEGY  # noqa: E402

MODELS = Path(__file__).parent.parent / "tests" / "data" / "models"


@dataclass(frozen=True)
class Operator:
    label: str
    kernel: str
    shape: str
    dtype: str  # of the multiply-accumulates: the lanes that set the limit


# Issue 19's seven operators. fir_q15 truncates, as CMSIS-DSP's arm_fir_q15 does (the
# library measured beside it); LIBRARY_FIR is that library call's shape.
OPERATORS = (
    Operator("matmul_s8 64^3", "matmul_s8", "m=64,n=64,k=64", "int8"),
    Operator("conv 3x3", "conv2d_s8", "h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride=1,pad=1,dilation=1", "int8"),
    Operator("depthwise 3x3", "dwconv2d_s8", "h=16,w=16,c=32,kh=3,kw=3,stride=1,pad=1,dilation=1", "int8"),
    Operator("matmul_f32 32^3", "matmul_f32", "m=32,n=32,k=32", "float32"),
    Operator("fir_f32", "fir_f32", "taps=32,block=64", "float32"),
    Operator("fully connected 512->128", "matmul_s8", "m=1,n=128,k=512", "int8"),
    Operator("fir_q15", "fir_q15", "taps=32,block=256,rounding=truncate", "int16"),
)
LIBRARY_FIR = "taps=32,block=256"
MLPERF_TINY = ("ds_cnn_kws", "mobilenet_v1_025_vww", "resnet8_cifar10")
DEFAULT_SHAPES = ["m=16,n=16,k=32", "m=5,n=13,k=7", "m=32,n=32,k=64", "m=64,n=64,k=64"]


def plain_loop(kernel, target, shape, inputs, work, cflags=("-O3",)):
    """The kernel's plain loop (its naive template, built with gcc and `cflags`) run on
    `inputs` and checked against the kernel's reference, as a variant is: the MeasureResult."""
    return measure_source(kernel, target, shape, kernel.render_naive(target, shape, "gcc", cflags), inputs, work)


def plain_loop_values(kernel, target, shape, inputs, work, cflags=("-O3",), what="plain loop") -> dict:
    """The plain loop's measured values (plain_loop); SystemExit naming `what` when it fails."""
    result = plain_loop(kernel, target, shape, inputs, work, cflags)
    if result.outcome.failed:
        raise SystemExit(f"{what} failed: {result.outcome.value}: {result.error}")
    return result.values


def measure_naive(kernel, target, shape, workload, work, cflags):
    return plain_loop_values(kernel, target, shape, workload_inputs(kernel, workload), work, cflags)["instructions"]


def tune_and_baselines(kernel, target, shape, budget, seed, db, work, strategy="random"):
    """One shape: a seeded tune (random search unless told), then the plain loop at -O3 and at
    -O3 without auto-vectorisation, on the same inputs. Returns (summary, plain, scalar) instructions."""
    summary = tune(TuneRequest(kernel, target, shape, strategy, budget, 2, seed), db)
    plain = measure_naive(kernel, target, shape, summary.workload, work, ("-O3",))
    scalar = measure_naive(kernel, target, shape, summary.workload, work, ("-O3", "-fno-tree-vectorize"))
    return summary, plain, scalar


def matmul_table(args) -> None:
    """The older matmul_s8 table: plain loop at -O3 and -O3 without vectorisation, MACs per instruction."""
    kernel, target = get_kernel("matmul_s8"), get_target("cortex-m55")
    print(f"matmul_s8 on {target.name} (QEMU {target.runner.machine}); random search, budget {args.budget}, "
          f"seed {args.seed}")
    header = (f"{'shape':>16} {'plain -O3':>11} {'plain -O3 novec':>15} {'tuned':>9} {'ratio':>7} "
              f"{'ratio novec':>11} {'MAC/instr':>9}  best configuration")
    print(header)
    layouts = []
    with tempfile.TemporaryDirectory() as tmp:
        db = TuningDatabase(Path(tmp) / "bench.db")
        for shape_text in args.shapes:
            shape = kernel.parse_shape(shape_text)
            summary, plain, scalar = tune_and_baselines(kernel, target, shape, args.budget, args.seed, db, Path(tmp))
            best = summary.best.trial
            tuned = best.values["instructions"]
            macs = shape["m"] * shape["n"] * shape["k"]
            print(f"{shape_text:>16} {plain:>11} {scalar:>15} {tuned:>9} {plain / tuned:>7.2f} {scalar / tuned:>11.2f} "
                  f"{macs / tuned:>9.2f}  {best.config.key()}")
            layouts.append((shape_text, macs, best_per_layout(db, summary.workload)))
    print("\nbest per weight layout (MACs per executed instruction; rowmajor = the skeleton's MVE path over N,")
    print("packed = B packed at export time, VMLADAVA.S8 dot products over K)")
    for shape_text, macs, per_layout in layouts:
        cells = "  ".join(f"{layout} {trial.values['instructions']:>8} instr {macs / trial.values['instructions']:5.2f} "
                          f"MAC/instr" for layout, trial in per_layout.items())
        print(f"{shape_text:>16}  {cells}")


def macs_of(kernel_name: str, shape) -> int:
    """Multiply-accumulates of one call (taps in the padding count, as in a layer's MAC count)."""
    if kernel_name in ("conv2d_s8", "dwconv2d_s8"):
        geo = geometry_of(shape)
        channels = shape["cin"] * shape["cout"] if kernel_name == "conv2d_s8" else shape["c"] * shape["mult"]
        return geo.oh * geo.ow * channels * shape["kh"] * shape["kw"]
    if kernel_name in ("fir_q15", "fir_f32"):
        return shape["taps"] * shape["block"]
    return shape["m"] * shape["n"] * shape["k"]


def mac_limit(target, dtype: str) -> float:
    """MACs per cycle at the vector unit's peak for `dtype`: the HAL's int8 figure, scaled by
    how many lanes of `dtype` a register holds against int8 (dual-beat: same bits per cycle)."""
    unit = target.vector_unit("mve")
    return unit.int8_macs_per_cycle * unit.lanes_for(dtype) / unit.lanes_for("int8")


def plain_values(kernel, target, shape, workload, work) -> dict:
    """The plain loop at GCC -O3 on the workload's inputs: the kernel's naive template, or for
    the FIR kernels (no such template) the C variant with one output per tile, no unrolling."""
    inputs = workload_inputs(kernel, workload)
    if hasattr(kernel, "render_naive"):
        return plain_loop_values(kernel, target, shape, inputs, work, what=f"{kernel.name} {target.name}: plain loop")
    space = kernel.space(target, shape)
    config = space.make({"tile": 1, "unroll": 1, "vector": "c", "compiler": "gcc", "opt": "O3"})
    trial = Evaluator(kernel, target, shape, space, inputs, work)(config)
    if trial.outcome.failed:
        raise SystemExit(f"{kernel.name} {target.name}: plain loop failed: {trial.outcome.value}: {trial.error}")
    return trial.values


def tuned_bests(kernel, target, shape, budget, seed, strategy, db):
    """A tune by estimated cycles; (workload, best trial by instructions, best by cycles)."""
    summary = tune(TuneRequest(kernel, target, shape, strategy, budget, 2, seed, "cycles"), db)
    ok = [t for t in db.trials(summary.workload) if not t.outcome.failed]
    if not ok:
        raise SystemExit(f"{kernel.name} {target.name}: no trial ran: {summary.failures}")
    return (summary.workload, min(ok, key=lambda t: t.values["instructions"]),
            min(ok, key=lambda t: t.values["cycles"]))


def operator_table(target, args, work: Path) -> None:
    """Issue 19's seven operators: tuned against the plain loop (and arm_fir_q15)."""
    library = library_fir(get_kernel("fir_q15"), target, LIBRARY_FIR, work)
    if isinstance(library, str):
        print(library)
    else:
        print("CMSIS-DSP arm_fir_q15 (MVEI/HELIUM, -O3, one call): "
              + ", ".join(f"{compiler} {call}" for compiler, (call, _) in library.items()) + " instructions")
    print(f"\noperators on {target.name}: {args.strategy} search, budget {args.budget}, seed {args.seed}, by estimated "
          "cycles; plain = naive loop at gcc -O3; x = plain / tuned")
    print(f"{'operator':>25} {'MACs':>7} {'instr':>8} {'cycles':>8} {'MAC/cyc':>7} {'limit':>5} {'plain instr':>11} "
          f"{'plain cyc':>9} {'instr x':>7} {'cyc x':>6} {'/library':>9}  best by cycles; best by instructions")
    for op in OPERATORS:
        kernel = get_kernel(op.kernel)
        shape = kernel.parse_shape(op.shape)
        db = TuningDatabase(work / f"{op.label.replace(' ', '_').replace('>', '')}.db")
        workload, by_instr, by_cycles = tuned_bests(kernel, target, shape, args.budget, args.seed, args.strategy, db)
        plain = plain_values(kernel, target, shape, workload, work)
        macs = macs_of(op.kernel, shape)
        instr, cycles = by_instr.values["instructions"], by_cycles.values["cycles"]
        versus = "-"
        if op.kernel == "fir_q15" and not isinstance(library, str):
            versus = f"{instr / min(call for call, _ in library.values()):.3f}"
        print(f"{op.label:>25} {macs:>7} {instr:>8} {cycles:>8.0f} {macs / cycles:>7.2f} {mac_limit(target, op.dtype):>5g} "
              f"{plain['instructions']:>11} {plain['cycles']:>9.0f} {plain['instructions'] / instr:>7.2f} "
              f"{plain['cycles'] / cycles:>6.2f} {versus:>9}  {by_cycles.config.key()}; {by_instr.config.key()}")


def model_workloads() -> list[tuple[str, str, dict, int]]:
    """(models, kernel, shape, MACs of one call) of every distinct tuned workload of the
    MLPerf Tiny models, in order of first appearance; a shape two models share once."""
    found: dict[tuple, list] = {}
    for name in MLPERF_TINY:
        for w in load_model(MODELS / f"{name}.tflite").workloads():
            entry = found.setdefault((w.kernel, w.shape), [[], w.kernel, dict(w.shape), w.macs // len(w.layers)])
            entry[0].append(name.split("_")[0])
    return [("+".join(dict.fromkeys(models)), kernel, shape, macs) for models, kernel, shape, macs in found.values()]


def short_shape(kernel_name: str, shape: dict) -> str:
    channels = f"{shape['cin']}->{shape['cout']}" if kernel_name == "conv2d_s8" else f"{shape['c']}"
    return (f"{shape['h']}x{shape['w']}x{channels} {shape['kh']}x{shape['kw']} "
            f"s{shape['stride_h']}x{shape['stride_w']}")


def layer_table(target, args, work: Path) -> None:
    """MACs per estimated cycle on every distinct MLPerf Tiny workload, then per kernel."""
    print(f"\nMLPerf Tiny layers on {target.name} (DS-CNN, MobileNetV1-0.25, ResNet-8): {args.strategy} search, "
          f"budget {args.layer_budget} per distinct workload, by estimated cycles")
    print(f"{'model':>16} {'kernel':>11} {'shape':>26} {'MACs':>8} {'cycles':>9} {'MAC/cyc':>7}  best configuration")
    per_kernel: dict[str, list[tuple[float, str]]] = {}
    for index, (models, kernel_name, shape, macs) in enumerate(model_workloads()):
        kernel = get_kernel(kernel_name)
        db = TuningDatabase(work / f"layer{index}.db")
        _, _, best = tuned_bests(kernel, target, kernel.parse_shape(shape), args.layer_budget, args.seed,
                                 args.strategy, db)
        rate = macs / best.values["cycles"]
        label = short_shape(kernel_name, shape)
        per_kernel.setdefault(kernel_name, []).append((rate, f"{models} {label}"))
        print(f"{models:>16} {kernel_name:>11} {label:>26} {macs:>8} {best.values['cycles']:>9.0f} {rate:>7.2f}  "
              f"{best.config.key()}")
    limit = mac_limit(target, "int8")
    print(f"\nper kernel, MACs per estimated cycle against the int8 limit of {limit:g}:")
    for kernel_name, rates in per_kernel.items():
        worst = min(rates)
        print(f"{kernel_name:>11}: {len(rates)} workloads, worst {worst[0]:.2f} ({worst[1]}), median "
              f"{statistics.median(r for r, _ in rates):.2f}, best {max(rates)[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=60, help="trials per operator (and per --shapes shape)")
    parser.add_argument("--layer-budget", type=int, default=8, help="trials per distinct MLPerf Tiny workload")
    parser.add_argument("--no-layers", action="store_true", help="leave out the MLPerf Tiny layers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY, help="search strategy of the operator and layer tunes")
    parser.add_argument("--shapes", nargs="*", help="only the older matmul_s8 table, on these shapes")
    args = parser.parse_args()
    if args.shapes is not None:
        args.shapes = args.shapes or DEFAULT_SHAPES
        matmul_table(args)
        return
    target = get_target("cortex-m55")
    with tempfile.TemporaryDirectory() as tmp:
        operator_table(target, args, Path(tmp))
        if not args.no_layers:
            layer_table(target, args, Path(tmp))


def best_per_layout(db, workload):
    """The best successful trial of each weight layout in the database."""
    best = {}
    for trial in db.trials(workload):
        if trial.outcome.failed:
            continue
        layout = trial.config["layout"]
        if layout not in best or trial.values["instructions"] < best[layout].values["instructions"]:
            best[layout] = trial
    return dict(sorted(best.items()))


if __name__ == "__main__":
    main()
