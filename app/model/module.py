"""A whole TFLite model as one ahead-of-time C module (docs/model-export.md):

  <name>.h                the model's inputs and outputs (shape, scale, zero point), the arena's
                          size and `int <name>_invoke(const int8_t *input, int8_t *output)`
                          (one pointer per input and output, in the model's order)
  <name>.c                the operators in order: each tuned layer's variant, each library
                          operator (app/model/ops), on tensors at the memory plan's offsets in
                          one arena; weights as const arrays already packed for the layout
                          each variant takes; no malloc, no interpreter
  <name>_arena.c          the static arena and <name>_invoke (a firmware that places its own
                          arena calls <name>_run(arena, inputs..., outputs...) and leaves this out)
  <function>.c            one source per distinct kernel variant and per library operator
  edgetune_kernels.mk/.cmake/edgetune_sections.ld   the kernel export's build fragments
  zephyr/                 the folder as a Zephyr module (module.yml, CMakeLists.txt, Kconfig)
  manifest.json           the typed Manifest with the model: its sha256, layer -> function,
                          the memory plan

This module renders, without touching the disk: the application chooses each workload's
variant (app/model/export.py) and writes the files.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from edgetune.hal import Target

from edgetune.codegen.export import (CMAKE, CMAKE_ID, CODE_SECTIONS_MARKER, MAKEFILE, SECTIONS_LD, ExportEntry,
                                     ExportError, ZephyrModule, _check_build_text, region_alias, zephyr_files)
from edgetune.codegen.kernels import KERNELS
from edgetune.codegen.kernels.base import COMMON_CFLAGS, comment_safe
from edgetune.codegen.manifest import CompiledUnit, KernelEntry, LayerFunction, Manifest, ModelEntry, PlannedTensor
from edgetune.codegen.code_placement import FIRMWARE_CODE_RESERVE, CodePlan

from .code_plan import fragment_regions, measured_values, module_plan, placed
from .memory_plan import ALIGN, MemoryPlan, TensorLife, plan_memory, scratch_id
from . import Model
from .graph import Tensor
from .operators import library_scratch, operator_params
from .ops import folded_operators
from edgetune.codegen.placement import scratch_section
from .templates import render
from edgetune.codegen.quant import requant_form
from edgetune.codegen.scratch import SharedScratch, shared_scratch

MODEL_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
C_TYPES = {np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t", np.dtype(np.int32): "int32_t",
           np.dtype(np.int64): "int64_t"}
# The C type of an activation tensor: int8, or int16 in TFLite's 16x8 scheme.
ACTIVATION_CTYPES = {"int8": "int8_t", "int16": "int16_t"}


def tensor_ctype(tensor: Tensor) -> str:
    return ACTIVATION_CTYPES.get(tensor.dtype, "int8_t")


@dataclass(frozen=True)
class Step:
    """One operator of the module, as it runs: its C function, the tensors it reads and the
    ones it writes (each in the function's argument order; a tuned layer and most library
    operators write one, SPLIT and UNPACK several)."""
    index: int
    op: str
    function: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    kernel: str | None = None  # a tuned layer's kernel
    in_place: tuple[int, ...] = ()  # tensors of `inputs` the first output may be written over


@dataclass(frozen=True)
class RenderedModel:
    files: dict[str, str]
    manifest: Manifest
    plan: MemoryPlan
    steps: tuple[Step, ...]
    scratch: SharedScratch = SharedScratch()  # the tuned layers' static scratch area (beside the arena)
    arena_scratch: SharedScratch = SharedScratch()  # their scratch planned in the arena: the needs
    scratch_needs: tuple[tuple[str, int, int], ...] = ()  # (function, bytes in the arena, static bytes)
    code_plan: CodePlan | None = None  # where functions and const arrays go (app/model/code_plan.py)


def model_name(path: str) -> str:
    """A C-safe name for the module from the model's file name: lower case, [a-z0-9_]."""
    name = re.sub(r"[^a-z0-9_]", "_", Path(path).stem.lower()).strip("_")
    if not name or not name[0].isalpha():
        name = "model_" + name
    return name[:40]


def model_file_name(path: str) -> str:
    """The name the export ships the model under (verify reads it from there)."""
    return model_name(path) + ".tflite"


def check_model_name(name: str) -> str:
    if not MODEL_NAME_RE.fullmatch(name):
        raise ExportError(f"--name {name!r}: a module name is a lower-case C identifier (a-z, 0-9, _), "
                          "starting with a letter, at most 40 characters")
    return name


def default_config(kernel, target: Target, shape: Mapping[str, int], compilers: Sequence[str] = ()):
    """A kernel's default configuration: the first legal point of its tuning space (the
    plain C direct loop, the target's first compiler), what a layer without a tuned trial
    runs; with `compilers`, the first legal point one of them builds (a firmware built with
    one toolchain)."""
    space = kernel.tuning_space(target, shape)
    # The legal points, walked in ascending index order without listing the product
    # (tuner/legal.py): the first is the one a scan from index 0 would stop at.
    legal = space.legal_indices()
    if not len(legal):
        raise ExportError(f"{kernel.name} {shape}: no legal configuration on {target.name}")
    config = space.config_at(int(legal[0]))
    if compilers and config["compiler"] not in compilers:
        return next((c for c in space if c["compiler"] in compilers), config)
    return config


def schedule(model: Model, name: str) -> tuple[Step, ...]:
    """The operators the module runs, in the model's order, folded ones left out."""
    graph = model.graph
    folded = folded_operators(graph)
    steps, functions = [], {}
    for layer in model.layers:
        op = layer.operator
        if op.index in folded:
            continue
        if layer.kernel is not None:
            # One function per distinct workload, named after the first layer it serves (the
            # kernel export's names spell out every shape key: too long for a module of 30).
            fn = functions.setdefault((layer.kernel, layer.shape), f"{name}_{layer.kernel}_l{op.index}")
            inputs = (layer.input_tensor, *(op.inputs[position] for _, position in layer.extra_inputs))
            steps.append(Step(op.index, op.op, fn, inputs, (op.outputs[0],), layer.kernel))
            continue
        params = operator_params(graph, op)
        inputs = params.input_tensors(op)
        outputs = tuple(op.outputs[:params.n_outputs])
        steps.append(Step(op.index, op.op, f"{name}_op{op.index}_{op.op.lower()}", inputs, outputs,
                          None, tuple(inputs[i] for i in params.in_place)))
    return tuple(steps)


def arena_tensors(model: Model, steps: Sequence[Step]) -> set[int]:
    """The tensors the arena holds: every one a step writes, but the model's outputs."""
    return {t for s in steps for t in s.outputs} - set(model.graph.outputs) - set(model.graph.inputs)


def memory_plan(model: Model, steps: Sequence[Step], scratch: Mapping[int, int] | None = None,
                ends: frozenset[int] | set[int] = frozenset(), lags: Mapping[int, int] | None = None,
                with_inputs: bool = False) -> MemoryPlan:
    """Lifetimes over the steps, in-place pairs where an operator allows them, one arena;
    `scratch` (step position -> bytes) plans each such step's scratch into the arena too,
    alive during that step only; `ends`: in-place outputs that end where their input ends;
    `lags`: in-place outputs that start that many bytes before their input; `with_inputs`:
    the model's inputs planned too, alive from the start (a patch plan's module writes over
    its input: app/model/patch_module.py)."""
    tensors = model.graph.tensors
    inside = arena_tensors(model, steps) | (set(model.graph.inputs) if with_inputs else set())
    first = {t: n for n, s in enumerate(steps) for t in s.outputs if t in inside}
    first.update({t: 0 for t in model.graph.inputs if t in inside})
    last = dict(first)
    for n, s in enumerate(steps):
        for t in s.inputs:
            if t in inside:
                last[t] = max(last.get(t, n), n)
    lives = [TensorLife(t, tensors[t].nbytes, first[t], last[t]) for t in sorted(inside)]
    lives += [TensorLife(scratch_id(n), nbytes, n, n) for n, nbytes in sorted((scratch or {}).items()) if nbytes > 0]
    in_place = {}
    for n, s in enumerate(steps):
        dying = [t for t in s.in_place if t in inside and last[t] == n]
        if s.outputs[0] in inside and dying:
            in_place[s.outputs[0]] = dying[0]
    # A tuned layer's variant that writes over its input reads all of it first: any size.
    grows = {s.outputs[0] for s in steps if s.kernel is not None and s.in_place} - set(ends) - set(lags or {})
    return plan_memory(lives, in_place, grows=grows, ends=ends, lags=lags,
                       pinned=model.graph.inputs[0] if with_inputs and model.graph.inputs else None)


def _c_values(values: np.ndarray, per_line: int = 24) -> str:
    flat = [str(int(v)) for v in np.asarray(values).reshape(-1)]
    return ",\n".join("    " + ", ".join(flat[i:i + per_line]) for i in range(0, len(flat), per_line))


def _constant(name: str, data: np.ndarray) -> dict:
    ctype = C_TYPES.get(np.asarray(data).dtype)
    if ctype is None:
        raise ExportError(f"{name}: constants of type {np.asarray(data).dtype} are not exported")
    return dict(name=name, ctype=ctype, count=max(int(np.asarray(data).size), 1), data=_c_values(data) or "    0")


def io_parameters(graph) -> dict[int, str]:
    """The C parameter of each model input and output tensor, in the model's order: `input`
    and `output` for a model of one of each (the API of one-input models), else `input0`,
    `input1`..., `output0`..."""
    names = {}
    for kind, tensors in (("input", graph.inputs), ("output", graph.outputs)):
        for k, t in enumerate(tensors):
            names[t] = kind if len(tensors) == 1 else f"{kind}{k}"
    return names


def _pointer(model: Model, plan: MemoryPlan, t: int, constants: dict[int, str], writable: bool) -> str:
    graph = model.graph
    base = tensor_ctype(graph.tensors[t])
    ctype = f"{base} *" if writable else f"const {base} *"
    if t in graph.inputs or t in graph.outputs:
        return io_parameters(graph)[t]
    if t in constants:
        return constants[t]
    return f"({ctype})({plan_address(plan, t, model)})"


def plan_address(plan: MemoryPlan, t: int, model: Model) -> str:
    """Where the plan put tensor (or scratch id) t: in the arena, or over the model's input
    (a patch plan's module)."""
    over = {a.tensor: a.offset for a in plan.over_input}
    if t in over:
        return f"(uint8_t *)(void *){io_parameters(model.graph)[model.graph.inputs[0]]} + {over[t]}u"
    return f"arena + {plan.by_tensor()[t].offset}u"


@dataclass(frozen=True)
class _Rendered:
    """The C of the steps: calls, constants, prototypes, sources and their build units."""
    calls: tuple[dict, ...]
    constants: tuple[dict, ...]
    prototypes: tuple[str, ...]
    sources: dict[str, str]
    kernels: tuple[KernelEntry, ...]
    op_units: tuple[str, ...]
    scratch: dict[str, tuple[int, int]]  # variant -> (bytes, alignment) of the static scratch it uses
    arena_scratch: dict[str, tuple[int, int]]  # variant -> (bytes, alignment) of its scratch in the arena


def _as_declared(pointer: str, tensor: Tensor, ctype: str, writable: bool) -> str:
    """A pointer to a tensor as a function declared with `ctype` takes it: cast where the two
    types differ (an operator that moves int16 values as bytes, SPLIT or PACK, takes int8_t)."""
    if tensor.constant or tensor_ctype(tensor) == ctype:
        return pointer
    return f"({ctype} *)(void *){pointer}" if writable else f"(const {ctype} *)(const void *){pointer}"


def _library_step(model: Model, target: Target, plan: MemoryPlan, step: Step, name: str,
                  position: int) -> tuple[dict, list[dict], str, str]:
    graph = model.graph
    op = graph.operators[step.index]
    params = operator_params(graph, op)
    constants, arrays = {}, []
    for t in step.inputs:
        if graph.tensors[t].constant:
            constants[t] = f"{name}_t{t}"
            arrays.append(_constant(constants[t], graph.tensors[t].array()))
    declared = (*params.input_ctypes, *(params.output_ctype,) * len(step.outputs))
    args = [_as_declared(_pointer(model, plan, t, constants, False), graph.tensors[t], declared[k], False)
            for k, t in enumerate(step.inputs)]
    args += [_as_declared(_pointer(model, plan, t, constants, True), graph.tensors[t], declared[len(step.inputs) + k], True)
             for k, t in enumerate(step.outputs)]
    outs = args[len(step.inputs):]
    if params.scratch_bytes:  # its working memory, planned in the arena for this step
        args.append(plan_address(plan, scratch_id(position), model))
    source = params.render(step.function, (f"of {Path(model.path).name}, in the module {name}.c",), target)
    return dict(step=step, args=args, outs=outs), arrays, params.declaration(step.function), source


def _tuned_arrays(model: Model, step: Step, name: str, config) -> tuple[list[dict], list[str], list[int]]:
    """A tuned layer's constants as the chosen variant takes them (packed layouts packed),
    its buffer arguments in the kernel's order (the input and output as "input" and
    "output", the constants by their array's name) and its scalar parameters."""
    layer = model.layers[step.index]
    kernel = KERNELS[layer.kernel]
    io = layer.io(np.zeros(int(np.prod(layer.kernel_input)), dtype=layer.dtype))
    deployed = kernel.deployed_io(io, config)
    arrays, order = [], []
    extra = {name: f"layer_input{n}" for n, (name, _) in enumerate(layer.extra_inputs, start=1)}
    for b in deployed.buffers:  # the layer's own input and output (not the model's): placed by the caller
        if b.name in (layer.input_name, layer.output_name):
            order.append("layer_input" if b.name == layer.input_name else "layer_output")
            continue
        if b.name in extra:  # another input tensor read at run time (the step's later inputs)
            order.append(extra[b.name])
            continue
        arrays.append(_constant(f"{name}_l{step.index}_{b.name}", b.data))
        order.append(arrays[-1]["name"])
    return arrays, order, [int(v) for _, v in deployed.params]


def _kernel_entry(target: Target, entry: ExportEntry, rendered, config) -> KernelEntry:
    compiler = target.compiler(rendered.compiler)
    section = scratch_section(target)
    return KernelEntry(
        kernel=entry.kernel, kernel_version=entry.kernel_version, shape=entry.shape, function=rendered.function,
        source=f"{rendered.function}.c", config=config.items, objective=entry.objective, bounds=entry.bounds,
        chosen_by=entry.chosen_by, value=float(entry.value), values=entry.values, compiler=compiler.name,
        compiler_command=compiler.command, cflags=(*compiler.cflags, *COMMON_CFLAGS, *rendered.cflags),
        trial_id=entry.trial_id, measured=entry.created, toolchain=entry.toolchain,
        scratch=rendered.scratch_bytes > 0 or (section is not None and section in rendered.source),
        definition=getattr(KERNELS.get(entry.kernel), "definition", ""))  # a kernel of your own: its files' sha256


def _provenance(target: Target, entry: ExportEntry, database: str) -> tuple[str, ...]:
    if entry.trial_id == 0:
        return (f"Not tuned: no trial of this workload on {target.name} in {database}; "
                "the kernel's default configuration.",)
    return (f"Tuned on {target.name}: {entry.objective}={entry.value:g} (best of {entry.trials} trials),",
            f"trial {entry.trial_id} of {database}, measured {entry.created}.")


@dataclass(frozen=True)
class _Variant:
    """A tuned function's rendered variant (one function serves every layer of its workload)."""
    rendered: object  # codegen's RenderedKernel
    entry: KernelEntry
    config: object
    declarations: tuple[str, ...]
    in_place_mode: str = ""  # KernelBase.in_place_mode
    in_place_lag: int = 0  # mode "lag": bytes the output starts before the input (KernelBase.in_place_lag)


def _render_variants(model: Model, target: Target, steps: Sequence[Step], chosen: Mapping[tuple, ExportEntry],
                     name: str, database: str) -> dict[str, _Variant]:
    """Each tuned function's C, before the memory plan: the plan takes each one's scratch."""
    forms = _requant_forms(model, steps)
    variants = {}
    for step in steps:
        if step.kernel is None or step.function in variants:
            continue
        layer = model.layers[step.index]
        kernel = KERNELS[layer.kernel]
        shape = kernel.parse_shape(layer.shape_dict)
        entry = chosen[(layer.kernel, layer.shape)]
        config = kernel.tuning_space(target, shape).make(dict(entry.config))
        rendered = kernel.render(target, shape, config, header=f"{name}.h", fn=step.function,
                                 provenance=_provenance(target, entry, database),
                                 shared_scratch=scratch_symbol(name), scratch_pointer=scratch_pointer(step.function),
                                 requant_forms=forms.get(step.function))
        if rendered.arena_scratch_bytes and rendered.scratch_align > ALIGN:
            raise ExportError(f"{step.function}: its scratch wants {rendered.scratch_align}-byte alignment; the "
                              f"arena is {ALIGN}-byte aligned")
        setter = (f"void {scratch_pointer(step.function)}_at(uint8_t *area)",) if rendered.arena_scratch_bytes else ()
        variants[step.function] = _Variant(rendered, _kernel_entry(target, entry, rendered, config), config,
                                           (rendered.declaration, *setter,
                                            *kernel.extra_declarations(shape, config, step.function)),
                                           kernel.in_place_mode(shape, config), kernel.in_place_lag(shape, config))
    return variants


def scratch_needs(steps: Sequence[Step], arena_scratch: Mapping[str, int]) -> dict[int, int]:
    """step position -> the bytes of scratch in the arena its variant needs (function ->
    bytes in `arena_scratch`; steps without any left out)."""
    return {n: arena_scratch[s.function] for n, s in enumerate(steps)
            if s.kernel is not None and arena_scratch.get(s.function)}


def plan_variants(model: Model, steps: Sequence[Step], in_place_modes: Mapping[str, str],
                  arena_scratch: Mapping[str, int], lags: Mapping[str, int] | None = None,
                  other_scratch: Mapping[int, int] | None = None, with_inputs: bool = False
                  ) -> tuple[tuple[Step, ...], MemoryPlan]:
    """The steps with the tuned ones that run in place marked, and the memory plan, for the
    variants described by their functions' in-place mode (KernelBase.in_place_mode; "lag":
    the output starts `lags[function]` bytes before the input) and scratch in the arena: what
    rendering plans, and what a choice of variants by RAM (ram_fit.py) plans before rendering.
    `other_scratch`: step position -> scratch of steps that are no tuned layer (a patch
    plan's stages); `with_inputs`: memory_plan's."""
    steps = tuple(replace(s, in_place=s.inputs[:1]) if s.kernel is not None and in_place_modes.get(s.function)
                  else s for s in steps)
    ends = {s.outputs[0] for s in steps if s.kernel is not None and in_place_modes.get(s.function) == "end"}
    behind = {s.outputs[0]: (lags or {})[s.function] for s in steps
              if s.kernel is not None and in_place_modes.get(s.function) == "lag"}
    needs = {**scratch_needs(steps, arena_scratch), **library_needs(model, steps, other_scratch or {}),
             **(other_scratch or {})}
    return steps, memory_plan(model, steps, needs, ends, behind, with_inputs=with_inputs)


def library_needs(model: Model, steps: Sequence[Step], others: Mapping[int, int]) -> dict[int, int]:
    """step position -> the bytes of working memory a library operator's C takes in the arena
    (an LSTM's state), for the steps that are neither tuned layers nor in `others` (a patch
    plan's stages)."""
    needs = {n: library_scratch(model.graph, model.operators[s.index]) for n, s in enumerate(steps)
             if s.kernel is None and n not in others}
    return {n: b for n, b in needs.items() if b > 0}


def _render_steps(model: Model, target: Target, plan: MemoryPlan, steps: Sequence[Step],
                  variants: Mapping[str, _Variant], name: str, stages: Mapping | None = None) -> _Rendered:
    calls, constants, prototypes, sources, kernels, op_units, scratch, in_arena = [], [], [], {}, {}, [], {}, {}
    planned_scratch = plan.scratch
    for n, step in enumerate(steps):
        if stages and n in stages:  # a patch plan's stage: its own source and band instances
            from .patch_render import render_stage  # it uses this module's helpers
            stage = render_stage(model, target, plan, step, n, stages[n])
            calls.append(stage.call)
            prototypes.append(stage.prototype)
            sources.update(stage.sources)
            op_units.append(f"{step.function}.c")
            kernels.update(stage.kernels)
            scratch.update(stage.scratch)
            continue
        if step.kernel is None:
            call, arrays, prototype, source = _library_step(model, target, plan, step, name, n)
            calls.append(call)
            # A constant several operators read (an LSTM's bias added at every step) is one array.
            constants += [dict(a, layer=step.index) for a in arrays if all(c["name"] != a["name"] for c in constants)]
            prototypes.append(prototype)
            sources[f"{step.function}.c"] = source
            op_units.append(f"{step.function}.c")
            continue
        variant = variants[step.function]
        arrays, order, scalars = _tuned_arrays(model, step, name, variant.config)
        constants += [dict(a, layer=step.index) for a in arrays]
        pointers = {"layer_input": _pointer(model, plan, step.inputs[0], {}, False),
                    "layer_output": _pointer(model, plan, step.outputs[0], {}, True),
                    **{f"layer_input{n}": _pointer(model, plan, t, {}, False) for n, t in enumerate(step.inputs[1:], 1)}}
        args = [pointers.get(a, a) for a in order] + [str(v) for v in scalars]
        call = dict(step=step, args=args, outs=[pointers["layer_output"]])
        if n in planned_scratch:
            call["scratch"] = f"{scratch_pointer(step.function)}_at({plan_address(plan, scratch_id(n), model)})"
        calls.append(call)
        if step.function not in kernels:
            rendered = variant.rendered
            kernels[step.function] = variant.entry
            if rendered.scratch_bytes:
                scratch[step.function] = (rendered.scratch_bytes, rendered.scratch_align)
            if rendered.arena_scratch_bytes:
                in_arena[step.function] = (rendered.arena_scratch_bytes, rendered.scratch_align)
            sources[f"{step.function}.c"] = rendered.source
            prototypes += variant.declarations
    return _Rendered(tuple(calls), tuple(constants), tuple(dict.fromkeys(prototypes)), sources,
                     tuple(kernels.values()), tuple(op_units), scratch, in_arena)


def _requant_forms(model: Model, steps: Sequence[Step]) -> dict[str, tuple[int, ...]]:
    """Per tuned function, the requantisation forms its layers' constant quantisation takes
    (a function may serve several layers of one shape), so that its C compiles only those
    beside the general form (KernelBase.render's requant_forms)."""
    forms: dict[str, set[int]] = {}
    for step in steps:
        if step.kernel is None:
            continue
        layer = model.layers[step.index]
        shifts = [c.data for c in layer.constants if c.name == "shift"]
        params = dict(layer.params)
        if not shifts or not {"out_zero", "act_min", "act_max"} <= params.keys():
            continue  # a kernel without per-channel requantisation: nothing to choose
        forms.setdefault(step.function, set()).add(
            requant_form(shifts[0], params["out_zero"], params["act_min"], params["act_max"]))
    return {fn: tuple(sorted(f)) for fn, f in forms.items()}


def scratch_symbol(name: str) -> str:
    """The one static scratch area of module `name`, which the tuned layers' variants use
    from its start for the buffers their templates keep out of the arena (codegen/scratch.py):
    the layers run one after another."""
    return f"{name}_scratch"


def scratch_pointer(function: str) -> str:
    """The tuned function's pointer to its layer's scratch in the arena, which it lays its
    buffers out from; the module sets it with `<pointer>_at(area)` (codegen/scratch.py)."""
    return f"{function}_scratch"


def _scratch_view(target: Target, scratch: SharedScratch) -> dict:
    """The static scratch area as model.c.j2 defines it, in the section each variant's own
    scratch was measured in."""
    section = scratch_section(target) if scratch.nbytes else None
    return dict(scratch=scratch, scratch_attr=f' __attribute__((section("{section}")))' if section else "")


def _io_view(tensor: Tensor, parameter: str, position: int) -> dict:
    """One input or output as the header describes it: `macro` names its defines
    (<P>_INPUT0_...), the parameter and the tensor (index, name) it is in the model."""
    q = tensor.quantization
    return dict(shape=tuple(tensor.shape), elements=tensor.elements, ctype=tensor_ctype(tensor),
                type_word=tensor_ctype(tensor)[:-2], scale=repr(float(q.scales[0])) if q else "1.0",
                zero_point=int(q.zero_points[0]) if q else 0, parameter=parameter, position=position,
                macro=parameter.rstrip("0123456789").upper() + str(position), tensor=tensor.index,
                tensor_name=_comment_text(tensor.name))


def _comment_text(text: str) -> str:
    """A name from the model, printable ASCII, inside a C comment."""
    return comment_safe(re.sub(r"[^ -~]", "?", text))[:80]


# Names that would give defines the header already has (<P>_INPUT0_ELEMENTS...) or look
# like them (the converter's default signature names, output_0...).
RESERVED_ALIAS = re.compile(r"(INPUT|OUTPUT)_?\d*")


def signature_names(graph) -> dict[int, str]:
    """tensor -> the first name a signature of the model gives it."""
    return dict(reversed(graph.io_names))


def io_aliases(graph) -> dict[int, str]:
    """A define name for each input and output from the name its signature gives it (else
    its tensor's): upper case, [A-Z0-9_], starting with a letter, at most 32 characters. A name
    that gives no such identifier, a reserved one, or one two tensors share gives none."""
    given = signature_names(graph)
    candidates = {}
    for t in (*graph.inputs, *graph.outputs):
        alias = re.sub(r"[^A-Za-z0-9]+", "_", given.get(t, graph.tensors[t].name)).strip("_").upper()
        if re.fullmatch(r"[A-Z][A-Z0-9_]{0,31}", alias) and not RESERVED_ALIAS.fullmatch(alias):
            candidates[t] = alias
    taken = list(candidates.values())
    return {t: alias for t, alias in candidates.items() if taken.count(alias) == 1}


def io_views(model: Model) -> tuple[list[dict], list[dict]]:
    """The module's inputs and outputs, in the model's order (the order of <name>_run's arguments)."""
    graph = model.graph
    names, aliases, given = io_parameters(graph), io_aliases(graph), signature_names(graph)
    inputs, outputs = ([dict(_io_view(graph.tensors[t], names[t], k), alias=aliases.get(t, ""),
                             signature_name=_comment_text(given.get(t, ""))) for k, t in enumerate(tensors)]
                       for tensors in (graph.inputs, graph.outputs))
    return inputs, outputs


def check_outputs_computed(model: Model, steps: Sequence[Step]) -> None:
    """Every model output is written by an operator the module runs (not an input, a
    constant or a value folded at export): the module has nothing else to write it."""
    graph = model.graph
    written = {t for s in steps for t in s.outputs}
    for k, t in enumerate(graph.outputs):
        if t not in written:
            tensor = graph.tensors[t]
            raise ExportError(f"{model.path}: output {k} (tensor {t}, {tensor.name}) is not computed by any operator "
                              "the module runs (a model input, a constant or shape arithmetic): the export takes "
                              "outputs that operators write")


def _regions(target: Target, arena_region: str, scratch: bool) -> list[dict]:
    used = [arena_region] if arena_region else []
    if scratch and target.firmware is not None:
        used.append(target.firmware.data_region)
    used = list(dict.fromkeys(used))
    return [dict(name=r, section=target.section_name(r), alias=region_alias(r), kind=target.region(r).kind,
                 wait_states=target.region(r).wait_states, origin=target.io_address(r), length=target.io_capacity(r))
            for r in used]


def _unit(source: str, compiler, own: tuple[str, ...], note: str) -> dict:
    return dict(source=source, var=re.sub(r"[^A-Z0-9_]", "_", source[:-2].upper()), compiler=compiler.name,
                compiler_command=compiler.command, cmake_id=CMAKE_ID.get(compiler.name, ""),
                target_cflags=compiler.cflags, own_cflags=own, note=note)


def _units(target: Target, name: str, r: _Rendered) -> list[dict]:
    first = target.compilers[0]
    plain = (*COMMON_CFLAGS, "-O2")
    units = [_unit(f"{name}.c", first, plain, "the model: operators in order, weights"),
             _unit(f"{name}_arena.c", first, plain, "the static arena and the invoke function")]
    units += [_unit(source, first, plain, "a library operator") for source in r.op_units]
    for k in r.kernels:
        compiler = target.compiler(k.compiler)
        own = k.cflags[len(compiler.cflags):] if k.cflags[:len(compiler.cflags)] == compiler.cflags else k.cflags
        units.append(_unit(k.source, compiler, own, f"{k.kernel} ({k.chosen_by})"))
    _check_build_text(units)
    return units


def _calls_view(model: Model, r: _Rendered) -> list[dict]:
    tensors = model.graph.tensors
    view = []
    for call in r.calls:
        step = call["step"]
        # A library operator's outputs are its last arguments; each is traced (as bytes: the
        # trace hook takes int8_t, and an int16 output is cast).
        outs = call.get("outs", call["args"][len(call["args"]) - len(step.outputs):])
        view.append(dict(step=step, args=call["args"], scratch=call.get("scratch", ""),
                         traced=[(out if tensors[t].dtype == "int8" else f"(const int8_t *)(const void *){out}",
                                  tensors[t].nbytes) for out, t in zip(outs, step.outputs)]))
    return view


def _layer_table(model: Model, steps: Sequence[Step], chosen: Mapping[tuple, ExportEntry],
                 stages: Mapping | None = None) -> tuple[LayerFunction, ...]:
    by_index = {s.index: s for s in steps}
    patched = {layer.index: steps[n].function for n, p in (stages or {}).items() for layer in p.layers}
    table = []
    for layer in model.layers:
        step = by_index.get(layer.index)
        if layer.index in patched:
            table.append(LayerFunction(layer.index, layer.op, patched[layer.index], "patched"))
        elif step is None:
            table.append(LayerFunction(layer.index, layer.op, "", "folded"))
        elif step.kernel is None:
            table.append(LayerFunction(layer.index, layer.op, step.function, "library"))
        else:
            tuned = chosen[(layer.kernel, layer.shape)].trial_id != 0
            table.append(LayerFunction(layer.index, layer.op, step.function, "tuned" if tuned else "default"))
    return tuple(table)


def zephyr_module(name: str, target: str, version: str, date: str) -> ZephyrModule:
    """The module folder as a Zephyr module of its own: named after the model, so that two
    models' modules (their C symbols carry the model's name) build side by side."""
    return ZephyrModule(f"edgetune_model_{name}", f"EDGETUNE_MODEL_{name.upper()}",
                        f"The model {name} compiled for {target}",
                        f"The model {name} compiled by edgetune {version} for {target} (exported {date})",
                        f"The model {name} as C, compiled by edgetune for {target}",
                        (f"Builds the module of {name}.h (exported by edgetune): the model's operators",
                         "and weights, each source with the compiler flags it was measured with."))


def _sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


def arena_region_of(target: Target, chosen: Mapping[tuple, ExportEntry], nbytes: int) -> str:
    """Where the arena goes: the region most of the tuned variants had their activations in
    (their trials' placement), else the target's default data region; "" on the host."""
    regions = target.placement_regions
    if not regions:
        return ""
    votes = [dict(e.config).get("activations_in") for e in chosen.values() if e.trial_id]
    votes = [v for v in votes if v in regions and target.io_capacity(v) >= nbytes]
    if votes:
        return max(dict.fromkeys(votes), key=votes.count)
    fits = [r for r in regions if target.io_capacity(r) >= nbytes]
    return fits[0] if fits else regions[0]


def render_model_module(model: Model, target: Target, chosen: Mapping[tuple, ExportEntry], *, name: str,
                        database: str, date: str, version: str, model_bytes: bytes, patch=None,
                        code_ram_room: int | None = None, code_reserve: int = FIRMWARE_CODE_RESERVE) -> RenderedModel:
    """Every file of a model export and its manifest. `chosen` maps each tuned workload
    (kernel, shape) to the variant it runs (trial_id 0: the kernel's default configuration);
    `patch` (patch_module.PatchPlan): stages of layers run band by band, over the input;
    `code_ram_room`: the most bytes of code and constants the code plan may copy into RAM."""
    name = check_model_name(name)
    steps = schedule(model, name)
    check_outputs_computed(model, steps)
    stages = {}
    if patch is not None:
        from .patch_module import patched_steps  # it builds this module's Steps
        steps, stages = patched_steps(model, steps, patch, name, Step)
    db_name = Path(database).name if database else "no database"
    variants = _render_variants(model, target, steps, chosen, name, comment_safe(db_name))
    if stages:
        from .patch_render import prepare_stages  # band instances rendered before the plan takes their scratch
        stages = prepare_stages(model, target, stages, chosen, name, comment_safe(db_name))
    steps, plan = plan_variants(model, steps, {fn: v.in_place_mode for fn, v in variants.items()},
                                {fn: v.rendered.arena_scratch_bytes for fn, v in variants.items()},
                                {fn: v.in_place_lag for fn, v in variants.items()},
                                {n: p.work_bytes for n, p in stages.items()}, with_inputs=bool(stages))
    if stages:
        from .patch_module import over_input
        plan = over_input(plan, model.graph.inputs[0])
    r = _render_steps(model, target, plan, steps, variants, name, stages)
    code_plan = module_plan(model, target, steps, r.constants, measured_values(r.kernels), r.sources, code_ram_room,
                            code_reserve)
    r = placed(r, code_plan, target, name)
    scratch = shared_scratch(r.scratch)
    arena_bytes = max(plan.arena_bytes, ALIGN)
    region = arena_region_of(target, chosen, arena_bytes)
    common = dict(name=name, P=name.upper(), model_file=comment_safe(Path(model.path).name), target=target.name,
                  date=date, edgetune_version=version, db=comment_safe(db_name), sha256=_sha256(model_bytes),
                  align=ALIGN, arena_bytes=arena_bytes, arena_region=region,
                  arena_section=target.section_name(region) if region else "",
                  **_scratch_view(target, scratch))
    inputs, outputs = io_views(model)
    calls = _calls_view(model, r)
    used = {a for c in calls for a in c["args"]}
    common.update(inputs=inputs, outputs=outputs, unused=[v["parameter"] for v in inputs if v["parameter"] not in used],
                  over_input=bool(plan.over_input),
                  parameters=", ".join([f"{'' if plan.over_input else 'const '}{v['ctype']} *{v['parameter']}" for v in inputs] +
                                       [f"{v['ctype']} *{v['parameter']}" for v in outputs]),
                  io_types=" or ".join(dict.fromkeys(sorted(v["type_word"] for v in (*inputs, *outputs)))),
                  arguments=", ".join(v["parameter"] for v in (*inputs, *outputs)))
    files = {f"{name}.h": render("model/model.h.j2", common),
             f"{name}.c": render("model/model.c.j2", dict(common, prototypes=r.prototypes, constants=r.constants,
                                                          calls=calls, tensors=len(plan.tensors),
                                                          total_bytes=plan.total_bytes,
                                                          placed_regions=", ".join(code_plan.used())
                                                          if code_plan else "")),
             f"{name}_arena.c": render("model/model_arena.c.j2", common), **r.sources}
    units = _units(target, name, r)
    regions = _regions(target, region, any(k.scratch for k in r.kernels)) + fragment_regions(target, code_plan)
    build = dict(common, header=f"{name}.h", units=units, regions=regions, sections_ld=SECTIONS_LD if regions else "",
                 code_placed=bool(code_plan and code_plan.split))
    files[MAKEFILE] = render("export_build.mk.j2", build)
    files[CMAKE] = render("export_build.cmake.j2", build)
    files.update(zephyr_files(build, zephyr_module(name, target.name, version, date)))
    if regions:
        files[SECTIONS_LD] = render("export_sections.ld.j2", dict(common, header=f"{name}.h", regions=regions,
                                                                   code_marker=CODE_SECTIONS_MARKER))
    entry = ModelEntry(name, model_file_name(model.path), common["sha256"], inputs[0]["shape"], outputs[0]["shape"],
                       arena_bytes, region, _layer_table(model, steps, chosen, stages),
                       tuple(PlannedTensor(a.tensor, a.offset, a.nbytes, a.first, a.last) for a in plan.tensors),
                       tuple(v["shape"] for v in inputs), tuple(v["shape"] for v in outputs))
    first = target.compilers[0]
    objectives = {k.objective for k in r.kernels}
    manifest = Manifest(
        target=target.name, objective=objectives.pop() if len(objectives) == 1 else "per_kernel",
        dispatch=CompiledUnit(f"{name}.c", first.command, (*first.cflags, *COMMON_CFLAGS, "-O2")),
        kernels=r.kernels, edgetune_version=version,
        files=tuple(sorted([*((f, _sha256(t)) for f, t in files.items()), (entry.file, entry.sha256)])),
        exported=date, database=database, model=entry)
    needs = tuple((fn, r.arena_scratch.get(fn, (0, 0))[0], r.scratch.get(fn, (0, 0))[0])
                  for fn in dict.fromkeys((*r.arena_scratch, *r.scratch)))
    return RenderedModel(files, manifest, plan, steps, scratch, shared_scratch(r.arena_scratch), needs, code_plan)
