"""`edgetune model ...`: TFLite models (docs/models.md). `model show` lists a model's layers,
which kernel serves each and the distinct workloads tuning would measure; `model tune`
(model_tune.py) and `model report` (model_report.py) join the group here."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from edgetune.model import Model, ModelLayer, check_fits, load_model
from edgetune.codegen.code_placement import check_code_reserve
from edgetune.model.code_plan import model_code_plan, placement_text, plan_text, ram_bytes
from edgetune.model.graph import read_graph
from edgetune.model.operators import untuned_as
from edgetune.model.ops import folded_operators
from edgetune.model.ops.float_island import absorber
from edgetune.targets import get_target

from . import options
from .model_report import model_compare_cmd, model_report_cmd
from .model_ram import ram_fit_json, ram_fit_lines
from .model_tune import counted, model_tune_cmd


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


def _workload_names(model: Model) -> dict[int, str]:
    """Operator index -> the name (w0, w1, ...) of the workload that serves it."""
    names = {}
    for n, workload in enumerate(model.workloads()):
        for index in workload.layers:
            names[index] = f"w{n}"
    return names


def model_json(model: Model, target: str | None) -> dict:
    names = _workload_names(model)
    return {
        "model": model.path, "target": target, "operators": len(model.layers), "macs": model.macs,
        "layers": [{"index": l.index, "op": l.op, "kernel": l.kernel, "shape": dict(l.shape),
                    "input": list(l.input_shape), "output": list(l.output_shape), "macs": l.macs,
                    "workload": names.get(l.index), "user_kernel": bool(l.arguments),
                    "oracle": l.oracle if l.kernel else None} for l in model.layers],
        "workloads": [{"name": f"w{n}", "kernel": w.kernel, "shape": dict(w.shape), "layers": list(w.layers),
                       "macs": w.macs} for n, w in enumerate(model.workloads())],
    }


def _shapes(layer: ModelLayer) -> str:
    outputs = len(layer.operator.outputs)  # SPLIT, UNPACK: the first output's shape, and how many
    return f"{_dims(layer.input_shape)} -> {_dims(layer.output_shape)}{f' (x{outputs})' if outputs > 1 else ''}"


def _layer_line(layer: ModelLayer, workload: str | None, folded: bool = False, into: int | None = None,
                absorbed_by: str = "dilated convolution", widths: tuple[int, int] = (18, 28)) -> str:
    shapes = _shapes(layer)
    served = f"{layer.kernel} ({workload})" if layer.kernel else untuned_as(layer.op, folded)
    if into is not None:  # an operator a rewrite absorbed (dilation.py, ops/float_island.py)
        served = f"- (in operator {into}'s {absorbed_by})"
    if layer.arguments:  # a kernel of the user's own (user_layers.py)
        served += ", yours" + (": its reference is the oracle" if layer.oracle == "reference" else "")
    op_width, shapes_width = widths
    return f"{layer.index:>4}  {layer.op:<{op_width}} {shapes:<{shapes_width}} {layer.macs:>12,}  {served}"


def print_model(model: Model, target: str | None) -> None:
    workloads = model.workloads()
    tuned = model.tuned
    click.echo(f"{click.format_filename(model.path)}: {counted(len(model.layers), 'operator')}, "
               f"{counted(len(tuned), 'tuned layer')} in {counted(len(workloads), 'distinct workload')}"
               + (f"; fits {target}" if target else ""))
    # The columns are as wide as this model's longest entry (UNIDIRECTIONAL_SEQUENCE_LSTM is 28
    # characters), never narrower than a short model's.
    widths = (max([18] + [len(layer.op) for layer in model.layers]),
              max([28] + [len(_shapes(layer)) for layer in model.layers]))
    click.echo(f"{'#':>4}  {'operator':<{widths[0]}} {'input -> output':<{widths[1]}} {'MACs':>12}  kernel (workload)")
    names, folded = _workload_names(model), folded_operators(model.graph)
    absorbed = dict(model.graph.absorbed)
    for layer in model.layers:
        into = absorbed.get(layer.index)
        click.echo(_layer_line(layer, names.get(layer.index), layer.index in folded, into,
                               absorber(model.graph, into) if into is not None else "", widths))
    click.echo("workloads (identical layers are tuned once):")
    for n, w in enumerate(workloads):
        served = ", ".join(map(str, w.layers))
        click.echo(f"  w{n:<3} {w.kernel:<12} {w.shape_text}  (layers {served}; {w.macs:,} MACs)")
    share = 100.0 * sum(l.macs for l in tuned) / model.macs if model.macs else 0.0
    click.echo(f"total: {model.macs:,} MACs, {share:.1f}% of them in tuned layers")


@click.group("model")
def model_group():
    """TFLite models: their layers and which kernels serve them (docs/models.md)."""


model_group.add_command(model_tune_cmd)
model_group.add_command(model_report_cmd)
model_group.add_command(model_compare_cmd)


@model_group.command("show")
@click.argument("model_file", metavar="MODEL.tflite")
@options.fit_target
@options.code_reserve
@options.as_json
@options.kernel_file
def model_show_cmd(model_file, target_name, code_reserve, as_json, kernel_files):
    """The layers of MODEL.tflite: operator, shapes, MACs, the kernel serving each and the
    distinct workloads (identical layers are tuned once)."""
    model = load_model(model_file)
    target = get_target(target_name) if target_name else None
    placement = None
    if target is not None:
        check_code_reserve(target, code_reserve)
        check_fits(model, target, code_reserve)
        placement = model_code_plan(model, target, code_reserve)
    if as_json:
        data = model_json(model, target.name if target else None)
        if placement is not None:  # the code plan's estimate: bytes per region
            data["code_plan"] = [dataclasses.asdict(load) for load in placement.loads()]
        click.echo(json.dumps(data, indent=2))
    else:
        fit = target.name + (f": {placement_text(placement)}" if placement is not None else "") if target else None
        print_model(model, fit)


def module_ram_line(result, target, io_bytes: int, io_words: str) -> str:
    """The module's RAM as `model verify` counts it, every part named so that they add up."""
    from edgetune.model.ram_fit import pointer_bytes
    r, m = result.rendered, result.rendered.manifest.model
    pointers = pointer_bytes(target) * sum(1 for _, arena, _ in r.scratch_needs if arena)
    code = ram_bytes(target, r.code_plan)
    parts = [("arena", m.arena_bytes), ("static scratch", r.scratch.nbytes), ("scratch pointers", pointers),
             (io_words, io_bytes), ("code and constants copied to RAM", code)]
    total = sum(n for _, n in parts)
    named = ", ".join(f"{what} {n:,}" for what, n in parts if n or what == io_words or what == "arena")
    return f"RAM: {total:,} bytes ({named})"


def _print_export(result, target) -> None:
    r, m = result.rendered, result.rendered.manifest.model
    click.echo(f"{m.name} for {target.name}: the operators edgetune's kernels run, and their functions:")
    for layer in m.layers:
        if layer.source in ("tuned", "default"):
            note = "tuned" if layer.source == "tuned" else "not tuned: the kernel's default configuration"
            click.echo(f"  {layer.index:>4} {layer.op:<18} {layer.function}  ({note})")
        elif layer.source == "patched":
            click.echo(f"  {layer.index:>4} {layer.op:<18} {layer.function}  (band by band: --patch)")
    if result.rendered.manifest.database == "" and result.untuned:
        click.echo(f"  {options.DEFAULT_DB} does not exist: {'the' if len(result.untuned) == 1 else 'all'} "
                   f"{counted(len(result.untuned), 'workload')} exported with the kernel's default configuration "
                   "(tune first: `edgetune model tune`)", err=True)
    else:  # the database named: without --db it is whatever edgetune.db the folder holds
        for workload in result.untuned:
            click.echo(f"  no trial in {result.rendered.manifest.database} for {workload}: exported with the "
                       "kernel's default configuration", err=True)
    io_bytes = read_graph(result.folder / m.file).interface_bytes
    io_words = "inputs and outputs" if len(m.input_shapes) > 1 or len(m.output_shapes) > 1 else "input and output"
    tflm = f"{result.tflm_arena:,} bytes" if result.tflm_arena is not None else f"unknown ({result.tflm_unknown})"
    click.echo(f"memory plan: arena {m.arena_bytes:,} bytes in {m.arena_region or 'the process'} "
               f"({counted(len(m.plan), 'tensor')}, {r.plan.total_bytes:,} bytes unshared); TFLite Micro's arena for this "
               f"model: {tflm}")
    click.echo(module_ram_line(result, target, io_bytes, io_words))
    if r.arena_scratch.nbytes:
        click.echo(f"scratch in the arena: {len(r.plan.scratch)} layers' scratch planned by lifetime, at most "
                   f"{r.arena_scratch.nbytes:,} bytes ({r.arena_scratch.largest}); {r.arena_scratch.unshared:,} bytes "
                   f"as the variants' own arrays")
    over = [s for s in r.steps if s.in_place and r.plan.by_tensor().get(s.outputs[0]) is not None
            and r.plan.by_tensor()[s.outputs[0]].shares is not None]
    if over:
        click.echo(f"in place: {len(over)} operators write their output over their input "
                   f"({', '.join(f'{s.index} {s.op}' for s in over[:6])}{', ...' if len(over) > 6 else ''})")
    if r.plan.over_input:
        count = sum(1 for s in r.steps if s.op == 'PATCHES')
        click.echo(f"patches: {count} stage{'' if count == 1 else 's'} run band by band; "
                   f"{len(r.plan.over_input)} tensors and buffers planned over the input buffer, which "
                   f"{m.name}_invoke WRITES OVER")
    if r.scratch.nbytes:
        click.echo(f"static scratch beside the arena: {r.scratch.nbytes:,} bytes, one area for {r.scratch.users} "
                   f"variants (the largest need: {r.scratch.largest}; {r.scratch.unshared:,} bytes unshared)")
    if plan_text(r.code_plan):
        click.echo(plan_text(r.code_plan))
    if result.ram_fit is not None:
        for line in ram_fit_lines(result.ram_fit, ram_bytes(target, r.code_plan)):
            click.echo(line)
    click.echo(f"module: {result.folder / (m.name + '.h')} ({m.name}_invoke)")


@model_group.command("export")
@click.argument("model_file", metavar="MODEL.tflite")
@options.target
@options.db
@options.out_folder("the module (replaced whole, atomically)")
@click.option("--name", default="", help="The module's C name (default: from the file name).")
@options.objective
@options.constraints
@options.max_ram
@options.code_reserve
@options.as_json
@options.compilers
@options.kernel_file
@click.option("--patch", "patch_text", default=None, metavar="PLAN",
              help="Run these layers band by band (patch-based inference), FIRST-LAST[:ROWS[:cache|recompute"
                   "[:default]]] by operator index (:default: the bands on the kernels' default configuration), "
                   "stages comma-separated, e.g. 0-3:1:cache,4-7:1:cache; or auto[:BYTES]: the "
                   "plan of fewest instructions measured in the emulator within BYTES (or --max-ram) of RAM. The module then "
                   "writes over its input buffer (docs/patches.md).")
def model_export_cmd(model_file, target_name, db_path, out_dir, name, objective, constraints, max_ram, code_reserve,
                     as_json, kernel_files, compilers, patch_text):
    """MODEL.tflite as one ahead-of-time C module for a target: each tuned layer's best trial
    (or the kernel's default configuration), the library operators, weights as const
    arrays, one arena by a memory plan (docs/model-export.md).

    The layers' trials come from --db, the database `model tune` wrote (edgetune.db by
    default, as for `model tune`). When edgetune.db does not exist, every layer gets its
    kernel's default configuration, and the command says so; a database named with --db
    must exist."""
    from edgetune.model.export import check_model_name, export_model
    from edgetune.codegen.export import ExportError
    from edgetune.model.patch_choice import choose_patch, parse_auto
    from edgetune.model.patch_module import parse_patch_plan

    target = get_target(target_name)
    check_code_reserve(target, code_reserve)
    if name:
        check_model_name(name)
    bound = parse_auto(patch_text) if patch_text is not None else False
    patch = parse_patch_plan(patch_text) if patch_text is not None and bound is False else None
    if patch_text is not None and max_ram is not None:  # the patch plan is how the bound is met
        if bound is False:
            raise ExportError(f"--max-ram with --patch {patch_text}: give --patch auto (the plan chosen within "
                              "--max-ram), or leave --max-ram out")
        bound, max_ram = (max_ram if bound is None else min(bound, max_ram)), None
    db = options.open_db_if_present(db_path)
    bounds = options.bounds_of(constraints)
    if bound is not False:  # auto: candidates measured in the emulator, the fewest instructions kept
        best, measured = choose_patch(Path(model_file), target, db, bound, compilers)
        for c in measured:
            figure = f"{c.instructions:,} {target.measures}" if c.instructions is not None else c.problem[:100]
            click.echo(f"  patch {c.plan.text if c.plan else 'none'}: RAM {c.ram:,} B, {figure}", err=True)
        click.echo(f"patch plan chosen: {best.plan.text if best.plan else 'none'} ({best.ram:,} B RAM, "
                   f"{best.instructions:,} {target.measures})", err=True)
        patch = best.plan
    # Under a --patch auto bound, the code plan copies into RAM only what the chosen plan leaves.
    room = bound - best.ram if bound not in (False, None) else None
    result = export_model(Path(model_file), target, db, Path(out_dir), name, objective, bounds, compilers, max_ram,
                          patch, room, code_reserve)
    if patch is not None and patch_text is not None and bound is False:
        from edgetune.model.patch_choice import no_gain_note
        note = no_gain_note(Path(model_file), target, db, result.rendered, patch, objective, bounds, compilers)
        if note:
            click.echo(note, err=True)
    if as_json:
        m = result.rendered.manifest.model
        click.echo(json.dumps({"folder": str(result.folder), "name": m.name, "arena_bytes": m.arena_bytes,
                               "arena_region": m.arena_region, "tflm_arena_bytes": result.tflm_arena,
                               "scratch_bytes": result.rendered.scratch.nbytes,
                               "arena_scratch_bytes": result.rendered.arena_scratch.nbytes,
                               "input_shapes": [list(s) for s in m.input_shapes],
                               "output_shapes": [list(s) for s in m.output_shapes],
                               "untuned": list(result.untuned), "layers": [l.to_json() for l in m.layers],
                               "max_ram": ram_fit_json(result.ram_fit, ram_bytes(target, result.rendered.code_plan))},
                              indent=2))
    else:
        _print_export(result, target)


@model_group.command("verify")
@click.argument("folder", metavar="DIR")
@options.export_target
@click.option("--inputs", "n_inputs", default=10, show_default=True, type=options.WholeNumber(min=1, max=1000),
              help="Random inputs (a saturating one is always added).")
@click.option("--layers", is_flag=True, help="Also compare every operator's output with TFLite Micro's.")
@options.seed
@click.option("--input", "input_files", multiple=True, metavar="FILE",
              help="Run on this input instead of random ones: the model's inputs in order as int8, raw bytes or a "
                   ".npy array (repeatable).")
@click.option("--save-vectors", "save_to", metavar="DIR", default=None,
              help="Write the inputs and TFLite Micro's outputs into DIR, as files and C arrays "
                   "(edgetune_vectors.h), for your firmware's own test.")
@options.as_json
@options.kernel_file
def model_verify_cmd(folder, target_name, n_inputs, layers, seed, as_json, kernel_files, input_files, save_to):
    """Build a model export as firmware would, run whole inferences in the target's emulator
    and compare each output bit for bit with TFLite Micro (exit 1 naming what differs)."""
    from edgetune.model.verify import verify_model

    from ..verify import manifest_target

    target = get_target(target_name) if target_name else manifest_target(Path(folder))
    unit = target.measures  # instructions in an emulator, time_ns on the host

    shown = []

    def echo(i) -> None:
        if not shown:  # a heading once the export is checked and runs, so bad input stays one line
            click.echo(f"{folder} on {target.name}: whole inferences, each output against the reference:")
            shown.append(True)
        value = dict(i.values).get(unit, i.instructions)
        click.echo(f"  {i.label}: {value:,.0f} {unit}" + (f"  DIFFERS: {i.problem}" if i.problem else ""))

    outcome = verify_model(Path(folder), target, n_inputs, layers, seed, None if as_json else echo, input_files,
                           Path(save_to) if save_to else None)
    if save_to and not as_json:
        click.echo(f"inputs and TFLite Micro's outputs written to {save_to}/ (vectors.json, *.bin, "
                   "edgetune_vectors.h)")
    # The first operator that differs names the fault; without --layers, the first output.
    problems = ([outcome.layer_problem] if outcome.layer_problem else []) + [i.problem for i in outcome.inferences
                                                                             if i.problem]
    if not problems and not outcome.inferences and outcome.unchecked:  # the oracle failed on every input
        problems = [f"no input checked: {outcome.unchecked[0]}" + (f" (it failed on all {len(outcome.unchecked)} inputs)"
                                                                  if len(outcome.unchecked) > 1 else "")]
    if not as_json:
        for line in outcome.unchecked:  # said before the verdict, which counts only the inputs checked
            click.echo(f"  {line}: not run, not checked")
    if as_json:
        size = outcome.size
        click.echo(json.dumps({"ok": outcome.ok, "problems": problems, "unchecked": list(outcome.unchecked),
                               "size": None if size is None else {"code_bytes": size.code_bytes,
                                                                  "flash_bytes": size.flash_bytes,
                                                                  "ram_bytes": size.ram_bytes,
                                                                  "copied_to_ram_bytes": size.copied_bytes},
                               "inferences": [{"input": i.label, "instructions": i.instructions, **dict(i.values)}
                                              for i in outcome.inferences]}, indent=2))
    elif outcome.ok:
        click.echo(f"{outcome.manifest.model.name} on {target.name}: {len(outcome.inferences)} inferences bit-exact "
                   f"with {outcome.oracle}" + (", every operator too" if layers else "")
                   + (f"; {len(outcome.unchecked)} input(s) not checked, the oracle failed on them (above)"
                      if outcome.unchecked else ""))
        size = outcome.size
        click.echo(f"module: {size.flash_bytes:,} bytes of flash ({size.code_bytes:,} of code), {size.ram_bytes:,} "
                   f"bytes of RAM ({size.ram_parts})")
    if not outcome.ok:
        hint = "" if layers or outcome.layer_problem else " (--layers names the first operator that differs)"
        click.echo(f"{folder}: {problems[0]}{hint}", err=True)
        sys.exit(1)
