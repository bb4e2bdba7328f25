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

from .memory_plan import ALIGN, aligned, scratch_id
from .module import (_kernel_entry, _pointer, _provenance, _tuned_arrays, default_config, plan_address,
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


@dataclass(frozen=True)
class LayerInstances:
    """A stage layer's band instances: band shape key -> function, each function's rendered C
    and entry, the layer's constants, the kernel's argument order and scalars, the configuration."""
    functions: dict
    rendered: dict
    arrays: list
    order: list
    scalars: list
    config: object
    declarations: tuple[str, ...]


@dataclass(frozen=True)
class PreparedStage:
    """A planned stage with its instances rendered: its work area holds the row buffers, then
    the largest scratch any instance keeps in the arena (the instances run one at a time)."""
    planned: PlannedStage
    layers_instances: tuple[LayerInstances, ...]

    @property
    def layers(self) -> tuple:
        return self.planned.layers

    @property
    def scratch_offset(self) -> int:
        return self.planned.schedule.work_bytes

    @property
    def work_bytes(self) -> int:
        scratch = [r.arena_scratch_bytes for li in self.layers_instances for r, _ in li.rendered.values()]
        return self.scratch_offset + aligned(max(scratch, default=0))


def band_shape(layer, call) -> dict:
    shape = dict(layer.shape_dict)
    shape.update(h=call.source[1] - call.source[0], pad_top=call.pads[0], pad_bottom=call.pads[1])
    return shape


def _layer_instances(model, target, stage: PlannedStage, k: int, chosen, name: str, database: str) -> LayerInstances:
    layer = stage.layers[k]
    kernel = KERNELS[layer.kernel]
    shapes = {tuple(sorted(band_shape(layer, c).items())): band_shape(layer, c)
              for band in stage.schedule.bands for c in band.calls if c.layer == k}
    entry = chosen[(layer.kernel, layer.shape)]
    config = stage_config(kernel, target, entry, list(shapes.values()), default_config,
                          not stage.stage.default_variants)
    functions, rendered, declarations = {}, {}, []
    own = config.items == tuple(entry.config)
    for j, (key, shape) in enumerate(shapes.items()):
        fn = f"{name}_{layer.kernel}_l{layer.index}_b{j}"
        parsed = kernel.parse_shape(shape)
        r = kernel.render(target, parsed, config, header=f"{name}.h", fn=fn,
                          provenance=(f"A band ({shape['h']} input rows, padding {shape['pad_top']} above, "
                                      f"{shape['pad_bottom']} below) of operator {layer.index}.",
                                      *(_provenance(target, entry, database) if own else
                                        ("The kernel's default configuration (the plan asks for it, or the "
                                         "layer's variant does not serve every band shape).",))),
                          shared_scratch=scratch_symbol(name), scratch_pointer=scratch_pointer(fn))
        if r.arena_scratch_bytes and r.scratch_align > ALIGN:
            raise ExportError(f"{fn}: its scratch wants {r.scratch_align}-byte alignment; the arena is {ALIGN}-byte aligned")
        setter = (f"void {scratch_pointer(fn)}_at(uint8_t *area)",) if r.arena_scratch_bytes else ()
        declarations += [r.declaration, *setter, *kernel.extra_declarations(parsed, config, fn)]
        functions[key] = fn
        rendered[fn] = (r, replace(entry, shape=tuple(shape.items()), config=config.items,
                                   chosen_by=entry.chosen_by if own else "untuned"))
    arrays, order, scalars = _tuned_arrays(model, SimpleNamespace(index=layer.index), name, config)
    return LayerInstances(functions, rendered, arrays, order, scalars, config, tuple(declarations))


def prepare_stages(model, target, stages, chosen, name: str, database: str) -> dict[int, PreparedStage]:
    """step position -> its stage with the band instances rendered (before the memory plan,
    which takes each stage's work area)."""
    return {n: PreparedStage(p, tuple(_layer_instances(model, target, p, k, chosen, name, database)
                                      for k in range(len(p.layers))))
            for n, p in stages.items()}


def _buffer(where: tuple[int, int], end: str) -> str:
    buffer, offset = where
    return f"{end} + {offset}u" if buffer < 0 else f"b{buffer} + {offset}u"


def _band_lines(prepared: PreparedStage) -> list[dict]:
    stage, bands = prepared.planned, []
    for band in stage.schedule.bands:
        lines = [f"memmove(b{m.buffer}, b{m.buffer} + {m.start}u, {m.nbytes}u);" for m in band.moves]
        for c in band.calls:
            li = prepared.layers_instances[c.layer]
            fn = li.functions[tuple(sorted(band_shape(stage.layers[c.layer], c).items()))]
            pointers = {"layer_input": _buffer(c.read, "input"), "layer_output": _buffer(c.write, "output")}
            args = [pointers.get(a, a) for a in li.order] + [str(v) for v in li.scalars]
            lines.append(f"{fn}({', '.join(args)}); /* operator {stage.layers[c.layer].index}: rows "
                         f"{c.rows[0]}-{c.rows[1] - 1} from {c.source[0]}-{c.source[1] - 1} */")
        bands.append(dict(rows=band.rows, lines=lines))
    return bands


def render_stage(model, target, plan, step, position: int, prepared: PreparedStage) -> RenderedStage:
    stage = prepared.planned
    instances = {fn: (r, entry, li.config) for li in prepared.layers_instances for fn, (r, entry) in li.rendered.items()}
    prototype = f"void {step.function}(const int8_t *input, int8_t *output, uint8_t *work)"
    setters = [f"{scratch_pointer(fn)}_at(work + {prepared.scratch_offset}u);"
               for fn, (r, _, _) in instances.items() if r.arena_scratch_bytes]
    source = render("model/patch_stage.c.j2", dict(
        name=name_of(step), function=step.function, prototype=prototype, bands=_band_lines(prepared),
        stage=stage.stage.text, operators=[layer.index for layer in stage.layers],
        offsets=stage.schedule.buffer_offsets(), buffer_bytes=stage.schedule.buffer_bytes,
        work_bytes=prepared.work_bytes, setters=setters,
        declarations=list(dict.fromkeys(d for li in prepared.layers_instances for d in li.declarations)),
        constants=[a for li in prepared.layers_instances for a in li.arrays]))
    kernels = {fn: _kernel_entry(target, entry, r, config) for fn, (r, entry, config) in instances.items()}
    args = [_pointer(model, plan, step.inputs[0], {}, False), _pointer(model, plan, step.outputs[0], {}, True),
            plan_address(plan, scratch_id(position), model) if prepared.work_bytes else "arena"]  # none: unused
    sources = {f"{step.function}.c": source, **{f"{fn}.c": r.source for fn, (r, _, _) in instances.items()}}
    scratch = {fn: (r.scratch_bytes, r.scratch_align) for fn, (r, _, _) in instances.items() if r.scratch_bytes}
    return RenderedStage(dict(step=step, args=args, outs=[args[1]]), prototype, sources, kernels, scratch)


def name_of(step) -> str:
    """The module's name from a stage step's function (<name>_stage<k>)."""
    return step.function.rsplit("_stage", 1)[0]
