"""The C of a patch plan's stage (app/model/patch_module.py): `<name>_stage<k>.c` runs the
stage's layers band by band, unrolled (each call on its row window, the cached halo rows moved
to the front of their work buffer before a band's calls), with the layers' constants; each
distinct band shape of a layer is an instance of the layer's kernel in its own source."""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

from edgetune.codegen.export import ExportError
from edgetune.codegen.kernels import KERNELS
from edgetune.codegen.manifest import KernelEntry

from .memory_plan import scratch_id
from .module import (_constant, _kernel_entry, _pointer, _provenance, _tuned_arrays, default_config, plan_address,
                     scratch_pointer, scratch_symbol)
from .patch_module import PlannedStage, stage_config
from .templates import render


@dataclass(frozen=True)
class RenderedStage:
    call: dict
    prototype: str
    sources: dict[str, str]
    kernels: dict[str, KernelEntry]
    scratch: dict[str, tuple[int, int]]  # instance -> its static scratch (bytes, alignment)


def band_shape(layer, call) -> dict:
    shape = dict(layer.shape_dict)
    shape.update(h=call.source[1] - call.source[0], pad_top=call.pads[0], pad_bottom=call.pads[1])
    return shape


def _layer_instances(model, target, stage: PlannedStage, k: int, chosen, name: str, database: str):
    """Layer k's band instances: shape key -> function, their rendered C, its constants and
    argument order, the configuration and the entry."""
    layer = stage.layers[k]
    kernel = KERNELS[layer.kernel]
    shapes = {tuple(sorted(band_shape(layer, c).items())): band_shape(layer, c)
              for band in stage.schedule.bands for c in band.calls if c.layer == k}
    entry = chosen[(layer.kernel, layer.shape)]
    config = stage_config(kernel, target, entry, list(shapes.values()), default_config)
    functions, rendered = {}, {}
    for j, (key, shape) in enumerate(shapes.items()):
        fn = f"{name}_{layer.kernel}_l{layer.index}_b{j}"
        r = kernel.render(target, kernel.parse_shape(shape), config, header=f"{name}.h", fn=fn,
                          provenance=(f"A band ({shape['h']} input rows, padding {shape['pad_top']} above, "
                                      f"{shape['pad_bottom']} below) of operator {layer.index}.",
                                      *_provenance(target, entry, database)),
                          shared_scratch=scratch_symbol(name), scratch_pointer=scratch_pointer(fn))
        if r.arena_scratch_bytes:
            raise ExportError(f"{fn}: its variant keeps scratch in the arena, which a band does not plan")
        functions[key] = fn
        rendered[fn] = (r, replace(entry, shape=tuple(shape.items())))
    arrays, order, scalars = _tuned_arrays(model, SimpleNamespace(index=layer.index), name, config)
    return functions, rendered, arrays, order, scalars, config


def _buffer(where: tuple[int, int], end: str) -> str:
    buffer, offset = where
    return f"{end} + {offset}u" if buffer < 0 else f"b{buffer} + {offset}u"


def render_stage(model, target, plan, step, position: int, stage: PlannedStage, chosen, name: str,
                 database: str) -> RenderedStage:
    per_layer = [_layer_instances(model, target, stage, k, chosen, name, database) for k in range(len(stage.layers))]
    bands = []
    for band in stage.schedule.bands:
        moves = [f"memmove(b{m.buffer}, b{m.buffer} + {m.start}u, {m.nbytes}u);" for m in band.moves]
        calls = []
        for c in band.calls:
            functions, _, _, order, scalars, _ = per_layer[c.layer]
            fn = functions[tuple(sorted(band_shape(stage.layers[c.layer], c).items()))]
            pointers = {"layer_input": _buffer(c.read, "input"), "layer_output": _buffer(c.write, "output")}
            args = [pointers.get(a, a) for a in order] + [str(v) for v in scalars]
            calls.append(f"{fn}({', '.join(args)}); /* operator {stage.layers[c.layer].index}: rows "
                         f"{c.rows[0]}-{c.rows[1] - 1} from {c.source[0]}-{c.source[1] - 1} */")
        bands.append(dict(rows=band.rows, lines=moves + calls))
    prototype = f"void {step.function}(const int8_t *input, int8_t *output, uint8_t *work)"
    instances = {fn: r for layer in per_layer for fn, r in layer[1].items()}
    source = render("model/patch_stage.c.j2", dict(
        name=name, function=step.function, prototype=prototype, bands=bands, stage=stage.stage.text,
        operators=[layer.index for layer in stage.layers], offsets=stage.schedule.buffer_offsets(),
        buffer_bytes=stage.schedule.buffer_bytes, work_bytes=stage.schedule.work_bytes,
        declarations=[r.declaration for r, _ in instances.values()],
        constants=[a for layer in per_layer for a in layer[2]]))
    kernels = {fn: _kernel_entry(target, entry, r, _config_of(per_layer, fn))
               for fn, (r, entry) in instances.items()}
    args = [_pointer(model, plan, step.inputs[0], {}, False), _pointer(model, plan, step.outputs[0], {}, True),
            plan_address(plan, scratch_id(position), model) if stage.schedule.work_bytes else "arena"]  # none: unused
    sources = {f"{step.function}.c": source, **{f"{fn}.c": r.source for fn, (r, _) in instances.items()}}
    scratch = {fn: (r.scratch_bytes, r.scratch_align) for fn, (r, _) in instances.items() if r.scratch_bytes}
    return RenderedStage(dict(step=step, args=args, outs=[args[1]]), prototype, sources, kernels, scratch)


def _config_of(per_layer, fn: str):
    return next(layer[5] for layer in per_layer if fn in layer[1])
