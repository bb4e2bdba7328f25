"""`edgetune model ...`: TFLite models (docs/models.md). `model show` lists a model's layers,
which kernel serves each and the distinct workloads tuning would measure. cli.py registers
the group behind its guard (edgetune's errors become one line and exit status 2)."""
from __future__ import annotations

import json

import click

from edgetune.codegen.model import Model, ModelLayer, check_fits, load_model
from edgetune.targets import get_target


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


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
                    "workload": names.get(l.index)} for l in model.layers],
        "workloads": [{"name": f"w{n}", "kernel": w.kernel, "shape": dict(w.shape), "layers": list(w.layers),
                       "macs": w.macs} for n, w in enumerate(model.workloads())],
    }


def _layer_line(layer: ModelLayer, workload: str | None) -> str:
    shapes = f"{_dims(layer.input_shape)} -> {_dims(layer.output_shape)}"
    served = f"{layer.kernel} ({workload})" if layer.kernel else "- (not tuned)"
    return f"{layer.index:>4}  {layer.op:<18} {shapes:<28} {layer.macs:>12,}  {served}"


def print_model(model: Model, target: str | None) -> None:
    workloads = model.workloads()
    tuned = model.tuned
    click.echo(f"{click.format_filename(model.path)}: {_count(len(model.layers), 'operator')}, "
               f"{_count(len(tuned), 'tuned layer')} in {_count(len(workloads), 'distinct workload')}"
               + (f"; fits {target}" if target else ""))
    click.echo(f"{'#':>4}  {'operator':<18} {'input -> output':<28} {'MACs':>12}  kernel (workload)")
    names = _workload_names(model)
    for layer in model.layers:
        click.echo(_layer_line(layer, names.get(layer.index)))
    click.echo("workloads (identical layers are tuned once):")
    for n, w in enumerate(workloads):
        served = ", ".join(map(str, w.layers))
        click.echo(f"  w{n:<3} {w.kernel:<12} {w.shape_text}  (layers {served}; {w.macs:,} MACs)")
    share = 100.0 * sum(l.macs for l in tuned) / model.macs if model.macs else 0.0
    click.echo(f"total: {model.macs:,} MACs, {share:.1f}% of them in tuned layers")


@click.group("model")
def model_group():
    """TFLite models: their layers and which kernels serve them (docs/models.md)."""


@model_group.command("show")
@click.argument("model_file", metavar="MODEL.tflite")
@click.option("--target", "target_name", default=None,
              help="Also check that the model's tensors fit this target's memory (a name or .toml file).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def model_show_cmd(model_file, target_name, as_json):
    """The layers of MODEL.tflite: operator, shapes, MACs, the kernel serving each and the
    distinct workloads (identical layers are tuned once)."""
    model = load_model(model_file)
    target = get_target(target_name) if target_name else None
    if target is not None:
        check_fits(model, target)
    if as_json:
        click.echo(json.dumps(model_json(model, target.name if target else None), indent=2))
    else:
        print_model(model, target.name if target else None)
