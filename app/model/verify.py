"""`edgetune model verify DIR --target T`: a model export built as a user's firmware builds
it (the export's own Make fragment, the compilers and flags it records) and linked with
edgetune's harness (firmware/) through a small glue that calls `<name>_run` on the input the
harness loads; whole inferences run in the target's emulator on random and saturating inputs,
and each output must equal, bit for bit, what the TFLite Micro interpreter computes on the
host from the .tflite shipped in the export. With `layers`, the module is also built with its
trace hook, and every operator's output is compared with TFLite Micro running that operator
alone (a one-operator model with the model's own tensors) on the module's own inputs to it:
the first operator that differs is named.

Bad input (a missing folder, a manifest or file edited after export, a manifest for another
target, an export that is not a model's) is an EdgetuneError (exit 2); a difference is a
VerifyOutcome with a problem (exit 1).
"""
from __future__ import annotations

import hashlib
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgetune.codegen import KERNELS
from edgetune.codegen.kernels.base import Buffer, KernelIO
from edgetune.codegen.manifest import Manifest, ManifestError, read_manifest
from edgetune.model import Model, load_model
from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Graph, Operator
from edgetune.model.oracle import OracleCase, oracle_name, oracle_output, run_tflm, run_tflm_isolated
from edgetune.model.user_layers import REFERENCE
from edgetune.model.memory_plan import ALIGN, aligned
from edgetune.model.module import schedule
from edgetune.model.ops import constant_value
from edgetune.hal import Placement, Target
from edgetune.targets import elf
from edgetune.targets.image import placed_regions
from edgetune.targets.measure import Expected, LinkedProgram, MeasureInput, MeasureResult, Pipeline, Run, RunOutput
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import require_program

from .test_vectors import read_input_files, save_vectors

from .reference import has_reference_layers, model_outputs
from .templates import render



class ModuleFailure(Exception):
    """The module did not build, link or run to the end: a failed verification (exit 1),
    not bad input (its files were checked against the manifest first)."""


@dataclass(frozen=True)
class Inference:
    label: str  # "random 3", "saturating"
    instructions: int
    values: tuple[tuple[str, object], ...]
    problem: str = ""
    # The run's instruction mix and memory accesses (targets with a cost model): what its
    # estimates are priced from, kept so a stored figure can be priced again.
    mix: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class ModuleSize:
    """The module as built (every object but the static arena's): flash is code and
    read-only data (the weights; the module has no initialised writable data); RAM is the arena, the input and output, and the objects' own
    writable data (kernels' static scratch), the stack not counted, and the code and constants
    the code plan put in a RAM region (stored in flash too, copied in at start-up)."""
    code_bytes: int
    flash_bytes: int
    ram_bytes: int
    copied_bytes: int = 0  # of ram_bytes: the code and constants copied into a RAM region

    @property
    def ram_parts(self) -> str:
        """What ram_bytes adds up, named."""
        return "arena, inputs, outputs, static scratch and pointers" + (
            f", code and constants copied to RAM ({self.copied_bytes:,})" if self.copied_bytes else "")


@dataclass(frozen=True)
class VerifyOutcome:
    manifest: Manifest
    inferences: tuple[Inference, ...]
    layer_problem: str = ""  # the first operator that differs (layers=True), or ""
    size: ModuleSize | None = None
    oracle: str = "TFLite Micro"  # what judged the outputs (with CUSTOM operators: and their kernels' references)
    # Inputs the oracle itself failed on ("random 3: TFLite Micro: its interpreter aborted (SIGABRT)"):
    # not run, not checked; the others are.
    unchecked: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return (not self.layer_problem and bool(self.inferences) and all(not i.problem for i in self.inferences))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_export(folder: Path, target: Target) -> Manifest:
    """The export's manifest, checked: a model export, for `target`, every file as exported."""
    manifest = read_manifest(folder)
    if manifest.model is None:
        raise ManifestError(f"{folder}: a kernel export, not a model export (edgetune model export makes one)")
    if manifest.target != target.name:
        raise ManifestError(f"{folder}: exported for target {manifest.target}, not {target.name}")
    for name, digest in manifest.files:
        path = Path(folder) / name
        if not path.is_file():
            raise ManifestError(f"{path}: listed in the manifest but missing")
        if _sha256(path) != digest:
            raise ManifestError(f"{path}: edited after export (its sha256 is not the manifest's)")
    for entry in manifest.kernels:  # kernels of the user's own: the definition exported from
        if not entry.definition:
            continue
        if entry.kernel not in KERNELS:
            raise ManifestError(f"{folder}: layer kernel {entry.kernel!r} is a kernel of your own: pass its "
                                "--kernel-file (or install its package)")
        now = KERNELS[entry.kernel].definition
        if now != entry.definition:
            raise ManifestError(f"{folder}: kernel {entry.kernel!r} changed since export (definition "
                                f"{entry.definition[:12]} at export, {now[:12] or 'shipped'} now): verify with the "
                                "definition it was exported from, or tune and export again")
    return manifest


def _make_objects(folder: Path, manifest: Manifest, workdir: Path) -> list[Path]:
    """Every object of the export but the static arena's, built by the export's Make fragment."""
    make = require_program("make", "install make (scripts/setup.sh)")
    (workdir / "Makefile").write_text("include $(EDGETUNE_DIR)/edgetune_kernels.mk\n"
                                      "all: $(EDGETUNE_OBJECTS)\n.PHONY: all\n")
    proc = subprocess.run([make, "-s", "all", f"EDGETUNE_DIR={folder}", f"EDGETUNE_BUILD_DIR={workdir / 'obj'}"],
                          cwd=workdir, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ModuleFailure(f"the export does not build: {(proc.stderr or proc.stdout).strip()[-600:]}")
    name = manifest.model.name
    return [workdir / "obj" / (Path(f).stem + ".o") for f, _ in manifest.files
            if f.endswith(".c") and f != f"{name}_arena.c"]


def _traced_object(folder: Path, manifest: Manifest, workdir: Path) -> Path:
    """<name>.c compiled as the manifest records it, with its trace hook on."""
    unit, name = manifest.dispatch, manifest.model.name
    out = workdir / f"{name}_traced.o"
    proc = subprocess.run([unit.compiler_command, *unit.cflags, f"-D{name.upper()}_TRACE=1", "-I", str(folder), "-c",
                           str(folder / unit.source), "-o", str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ModuleFailure(f"{unit.source} does not build with its trace hook: {proc.stderr.strip()[-600:]}")
    return out


def block_layout(shapes, dtypes=None) -> tuple[tuple[int, ...], int]:
    """Where each tensor of `shapes` (int8, or of `dtypes`) starts in one buffer holding them
    all, in bytes, each at an ALIGN-byte boundary (what the kernels' vector loads like), and
    the buffer's size. The inputs share one harness buffer and the outputs another: the
    harness takes at most ET_MAX_BUFFERS (firmware/common/harness.h), fewer than a model may
    have tensors."""
    offsets, end = [], 0
    for shape, dtype in zip(shapes, dtypes or ["int8"] * len(shapes)):
        offsets.append(end)
        end = aligned(end + int(np.prod(shape)) * np.dtype(dtype).itemsize)
    return tuple(offsets), max(end, ALIGN)


def io_dtypes(model: Model) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The types of the model's inputs and outputs, in its order (int8, or int16 for 16x8)."""
    graph = model.graph
    return tuple(graph.tensors[t].dtype for t in graph.inputs), tuple(graph.tensors[t].dtype for t in graph.outputs)


def _io(manifest: Manifest, xs: list[np.ndarray], trace_bytes: int, dtypes=None) -> KernelIO:
    """The harness's buffers: the inputs (one block of bytes, in the model's order), the
    arena, the outputs (one block), the trace."""
    m = manifest.model
    ins, outs = dtypes or (None, None)
    offsets, size = block_layout(m.input_shapes, ins)
    inputs = np.zeros(size, dtype=np.int8)
    for offset, x, dtype in zip(offsets, xs, ins or ["int8"] * len(xs)):
        raw = np.ascontiguousarray(x, dtype=np.dtype(dtype).newbyteorder("<")).reshape(-1).view(np.int8)
        inputs[offset:offset + raw.size] = raw
    buffers = [Buffer("inputs", inputs), Buffer("arena", np.zeros(m.arena_bytes, dtype=np.int8)),
               Buffer("outputs", np.zeros(block_layout(m.output_shapes, outs)[1], dtype=np.int8), is_output=True)]
    if trace_bytes:
        buffers.append(Buffer("trace", np.zeros(trace_bytes, dtype=np.int8), is_output=True))
    return KernelIO(tuple(buffers), ())


def module_size(manifest: Manifest, objects: list[Path], dtypes=None, copied: tuple[str, ...] = ()) -> ModuleSize:
    """`copied`: prefixes of the sections a RAM region holds a copy of (code and constants the
    code plan put there): their bytes count as flash (stored) and as RAM (copied in)."""
    m = manifest.model
    code = sum(elf.code_bytes(o) for o in objects)
    writable = sum(elf.ram_bytes(o) + elf.bytes_in(o, copied) for o in objects)
    loaded = sum(elf.alloc_bytes(o) for o in objects)
    types = (*dtypes[0], *dtypes[1]) if dtypes else ("int8",) * (len(m.input_shapes) + len(m.output_shapes))
    io = sum(int(np.prod(shape)) * np.dtype(t).itemsize for shape, t in zip((*m.input_shapes, *m.output_shapes), types))
    stored = sum(elf.bytes_in(o, copied) for o in objects)
    return ModuleSize(code, loaded - writable + stored, m.arena_bytes + io + writable, stored)


def _trace_table(model: Model, manifest: Manifest) -> list[dict]:
    """Where each traced output goes in the trace buffer: one entry per output of every step,
    in the order the module calls its trace hook (the steps' order, then the outputs')."""
    offset, table = 0, []
    for step in schedule(model, manifest.model.name):
        for position, tensor in enumerate(step.outputs):
            nbytes = model.graph.tensors[tensor].nbytes
            table.append(dict(op=step.index, offset=offset, bytes=nbytes, tensor=tensor, position=position))
            offset += nbytes
    return table


INFERENCE_TIMEOUT_S = 600  # a whole inference in an emulator: far above any kernel's run

# The harness's own .data and .bss, beside the module's (measured: under 1 KiB), rounded up.
HARNESS_RAM = 4096
RESERVE_STEP = 16384


def firmware_for(target: Target, module_ram: int) -> Target:
    """The target with enough data memory reserved for the module's own writable data (its
    variants' static scratch: many im2col variants add up), as the firmware that ships the
    module would reserve it. Instruction counts do not depend on it; the buffer regions keep
    the rest of their memory."""
    fw = target.firmware
    if fw is None:
        return target
    needed = module_ram + HARNESS_RAM + fw.stack_size
    if needed <= fw.data_reserved:
        return target
    reserved = -(-needed // RESERVE_STEP) * RESERVE_STEP
    if reserved >= target.region(fw.data_region).size:
        raise ModuleFailure(f"the module's {module_ram} bytes of static data (its variants' scratch) and the stack "
                            f"do not fit {fw.data_region} of {target.name}")
    return replace(target, firmware=replace(fw, data_reserved=reserved))


@dataclass(frozen=True)
class _Module:
    """A model export's objects and glue, ready to be linked and run on `target` (the
    target with the module's data memory reserved)."""
    target: Target
    program: LinkedProgram
    trace_bytes: int
    size: ModuleSize


def _build(folder: Path, manifest: Manifest, target: Target, workdir: Path, traced: list[dict] | None,
           dtypes=None) -> _Module:
    runner_for(target).check_tools()
    workdir.mkdir(parents=True, exist_ok=True)
    objects = _make_objects(folder, manifest, workdir)
    copied = tuple(f"{r['section']}." for r in placed_regions(target) if r["copied"]) if target.firmware else ()
    size = module_size(manifest, objects, dtypes, copied)
    target = firmware_for(target, sum(elf.ram_bytes(o) for o in objects))
    name = manifest.model.name
    trace_bytes = sum(t["bytes"] for t in traced) if traced else 0
    if traced:
        objects = [o for o in objects if o.stem != name] + [_traced_object(folder, manifest, workdir)]
    sizes = [(b.data.nbytes, int(b.is_output)) for b in _io(manifest, [], trace_bytes, dtypes).buffers]
    ins, outs = dtypes or (["int8"] * len(manifest.model.input_shapes), ["int8"] * len(manifest.model.output_shapes))
    glue = render("model/verify_glue.c.j2", dict(name=name, trace=bool(traced), traced=traced or [], sizes=sizes,
                                                 inputs=block_layout(manifest.model.input_shapes, ins)[0],
                                                 outputs=block_layout(manifest.model.output_shapes, outs)[0],
                                                 input_types=[f"{t}_t" for t in ins],
                                                 output_types=[f"{t}_t" for t in outs]))
    # The I/O block (and so the arena) in the region the memory plan chose for the arena.
    region = manifest.model.arena_region
    placement = Placement(region, region) if region else None
    return _Module(target, LinkedProgram(tuple(objects), glue, placement), trace_bytes, size)


def _measure(module: _Module, runs: tuple[Run, ...], workdir: Path, each=None) -> MeasureResult:
    """The module linked and run on every run's input (each told to `each` as it completes);
    ModuleFailure when it does not link."""
    result = Pipeline(runner_for(module.target)).measure(MeasureInput(module.program, runs), workdir,
                                                         lambda: INFERENCE_TIMEOUT_S, each)
    if result.build is None:
        raise ModuleFailure(f"the module does not link for {module.target.name}: {result.message.strip()[-600:]}")
    return result


def _ran_to_the_end(result: MeasureResult) -> None:
    if result.fault is not None:
        raise ModuleFailure(f"the module did not run to the end ({result.fault.value}): {result.message}")


def draw_inputs(shapes: tuple[tuple[int, ...], ...], n: int, seed: int, dtypes=None) -> list[tuple[str, list[np.ndarray]]]:
    """n draws of uniform values of their type (int8 by default; int16 inputs of a 16x8 model)
    for every input of the model (`shapes`, in its order), then one of only the type's
    extremes (-128 and 127 for int8: it saturates)."""
    rng = np.random.default_rng(seed)
    limits = [np.iinfo(t) for t in (dtypes or ["int8"] * len(shapes))]
    drawn = [(f"random {i}", [rng.integers(q.min, q.max + 1, size=s, dtype=q.dtype) for s, q in zip(shapes, limits)])
             for i in range(n)]
    return drawn + [("saturating", [rng.choice(np.array([q.min, q.max], dtype=q.dtype), size=s)
                                    for s, q in zip(shapes, limits)])]


def _difference(got: np.ndarray, want: np.ndarray, oracle: str = "TFLite Micro") -> str:
    got, want = got.reshape(-1), want.reshape(-1)
    bad = np.flatnonzero(got != want)
    return (f"{bad.size} of {want.size} values differ from {oracle}; first at {int(bad[0])}: "
            f"got {int(got[bad[0]])}, {oracle} {int(want[bad[0]])}")


def _model_oracle(model: Model) -> str:
    if not has_reference_layers(model):
        return "TFLite Micro"
    kernels = sorted({layer.kernel for layer in model.layers if layer.oracle == REFERENCE})
    return f"TFLite Micro with {', '.join(kernels)}'s reference"


def operator_model(model: Model, op: Operator) -> tuple[bytes, list[int]]:
    """One operator alone in a model with its real tensors (renumbered; inputs computed by
    folded SHAPE/STRIDED_SLICE/PACK chains become constants holding their value): the
    model's bytes and, in order, the original tensors that are its inputs."""
    graph = model.graph
    ops = _with_absorbed_feeders(graph, op)
    produced = {i for o in ops for i in o.outputs}
    order = list(dict.fromkeys(i for o in ops for i in (*o.inputs, *o.outputs) if i >= 0))
    tensors = []
    for new, old in enumerate(order):
        t = graph.tensors[old]
        folded = None if t.constant or old in produced else constant_value(graph, old)
        if folded is not None:
            t = constant(new, t.name, np.asarray(folded).astype(t.dtype).reshape(t.shape))
        tensors.append(replace(t, index=new, signature=None))
    renumber = {old: new for new, old in enumerate(order)}
    written = [Operator(n, o.op, tuple(renumber.get(i, -1) for i in o.inputs), tuple(renumber[i] for i in o.outputs),
                        o.options_type, o.options) for n, o in enumerate(ops)]
    inputs = [i for o in ops for i in dict.fromkeys(o.inputs)  # an LSTM's variable state is its own, not an input
              if i >= 0 and i not in produced and not tensors[renumber[i]].constant and not tensors[renumber[i]].variable]
    inputs = list(dict.fromkeys(inputs))
    data = build_model(tensors, written, [renumber[i] for i in inputs], list(written[-1].outputs),
                       description=f"edgetune verify: operator {op.index}")
    return data, inputs


def _with_absorbed_feeders(graph: Graph, op: Operator) -> list[Operator]:
    """The operator after the absorbed operators whose results it reads (a float island's
    DEQUANTIZE and float operators before its QUANTIZE), in the model's order: TFLite Micro
    runs them together. A dilated convolution reads none of its absorbed copies' results."""
    # the absorbing operator by its outputs, not its index (op_measure renumbers it to 0)
    into_op = {index for index, into in graph.absorbed if graph.operators[into].outputs == op.outputs}
    chain, wanted = [op], set(op.inputs)
    for index in sorted(into_op, reverse=True):
        feeder = graph.operators[index]
        if wanted & set(feeder.outputs):
            chain.insert(0, feeder)
            wanted |= set(feeder.inputs)
    return chain


def _operator_oracle(model: Model, op: Operator, values: dict[int, np.ndarray]) -> list[np.ndarray]:
    """The oracle's outputs of one operator (all of them, in order) on the module's values of its inputs."""
    layer = model.layers[op.index]
    if layer.oracle == REFERENCE:  # a CUSTOM operator: its kernel's reference on the module's input to it
        return [oracle_output(layer, values[layer.input_tensor])]
    data, inputs = operator_model(model, op)
    return run_tflm(data, [values[i] for i in inputs], n_outputs=len(op.outputs))


def first_bad_layer(model: Model, traced: list[dict], trace: np.ndarray, xs: list[np.ndarray]) -> str:
    """Each operator's traced outputs against TFLite Micro running it alone on the module's
    own values of its inputs (the model's inputs `xs`, in its order); the first that differs, or ""."""
    graph = model.graph
    values = {t: np.asarray(x).reshape(graph.tensors[t].shape) for t, x in zip(graph.inputs, xs)}
    for t in traced:
        out = graph.tensors[t["tensor"]]
        raw = np.ascontiguousarray(trace[t["offset"]:t["offset"] + t["bytes"]]).view(np.dtype(out.dtype).newbyteorder("<"))
        values[t["tensor"]] = raw.astype(out.dtype).reshape(out.shape)
    wanted: dict[int, list[np.ndarray]] = {}
    for t in traced:
        op = graph.operators[t["op"]]
        if op.index not in wanted:
            wanted[op.index] = _operator_oracle(model, op, values)
        want, got = np.asarray(wanted[op.index][t["position"]]), values[t["tensor"]]
        if not np.array_equal(got.reshape(-1), want.reshape(-1)):
            layer = model.layers[op.index]
            name = f"CUSTOM ({op.custom_code})" if op.op == "CUSTOM" else op.op
            return (f"operator {op.index} ({name}), output tensor {t['tensor']}: "
                    f"{_difference(got, want, oracle_name(layer) if layer.kernel else 'TFLite Micro')}")
    return ""


def _output_problem(model: Model, label: str, got: list[np.ndarray], want: list[np.ndarray]) -> str:
    """The first output that differs from the oracle's, or "" (output k named when there are several)."""
    graph = model.graph
    for k, (g, w) in enumerate(zip(got, want)):
        if not np.array_equal(g.reshape(-1), np.asarray(w).reshape(-1)):
            which = f"output {k} (tensor {graph.outputs[k]}): " if len(graph.outputs) > 1 else ""
            return f"{label} input: {which}{_difference(g, np.asarray(w), _model_oracle(model))}"
    return ""


def _outputs(manifest: Manifest, block: np.ndarray, dtypes=None) -> list[np.ndarray]:
    """The model's outputs (in its order, of `dtypes`: int8 by default) from the harness's output block."""
    shapes = manifest.model.output_shapes
    dtypes = dtypes or ["int8"] * len(shapes)
    block = np.ascontiguousarray(block).view(np.int8)
    return [block[o:o + int(np.prod(s)) * np.dtype(t).itemsize].view(np.dtype(t).newbyteorder("<")).astype(t)
            for o, s, t in zip(block_layout(shapes, dtypes)[0], shapes, dtypes)]


def _inference_run(manifest: Manifest, model: Model, label: str, xs: list[np.ndarray], want: list[np.ndarray]) -> Run:
    """A whole inference on `xs`, its outputs judged against the oracle's (`want`)."""
    dtypes = io_dtypes(model)

    def compare(_, block, expected):
        return _output_problem(model, label, _outputs(manifest, block, dtypes[1]), expected)

    return Run(_io(manifest, xs, 0, dtypes), Expected((want,), compare))


def oracle_outputs(model: Model, data: bytes, inputs: list[tuple[str, list[np.ndarray]]]) -> list[OracleCase]:
    """The oracle's outputs for every input: TFLite Micro in a child process (it aborts on some
    inputs of some models, and an abort must not end the verification), or, for a model with
    CUSTOM operators (their kernels' references live in this process), here."""
    if has_reference_layers(model):
        return [OracleCase(tuple(model_outputs(model, data, xs))) for _, xs in inputs]
    return run_tflm_isolated(data, [xs for _, xs in inputs], len(model.graph.outputs))


def _inference(label: str, output: RunOutput) -> Inference:
    values = output.values
    numbers = tuple((k, v) for k, v in sorted(values.items()) if isinstance(v, (int, float)))
    mix = tuple((k, dict(values[k])) for k in ("mix", "accesses") if isinstance(values.get(k), dict))
    return Inference(label, int(values.get("instructions", 0)), numbers, output.problem, mix)


def _layers(folder: Path, manifest: Manifest, target: Target, model: Model, inputs, workdir: Path) -> str:
    """The first operator that differs on any input, or ""."""
    traced = _trace_table(model, manifest)
    module = _build(folder, manifest, target, workdir, traced, io_dtypes(model))

    def run(label: str, xs: list[np.ndarray]) -> Run:
        def compare(_, trace, want):
            problem = first_bad_layer(model, traced, trace, want)
            return problem and f"{label} input: {problem}"

        return Run(_io(manifest, xs, module.trace_bytes, io_dtypes(model)), Expected((None, xs), compare))

    result = _measure(module, tuple(run(label, x) for label, x in inputs), workdir)
    if result.first_wrong is None:
        _ran_to_the_end(result)
    return result.error


def verify_model(folder: Path, target: Target, n_inputs: int = 10, layers: bool = False, seed: int = 0,
                 progress=None, input_files=(), save_to: Path | None = None) -> VerifyOutcome:
    """Build the export in `folder` for `target`, run whole inferences on `n_inputs` random
    inputs and a saturating one (or on `input_files`, the user's: app/model/test_vectors.py),
    compare with TFLite Micro; with `layers`, every operator. `save_to`: a folder for the
    inputs and TFLite Micro's outputs, as files and C arrays."""
    folder = Path(folder).resolve()
    manifest = check_export(folder, target)
    patched = [layer.index for layer in manifest.model.layers if layer.source == "patched"]
    if layers and patched:  # a stage traces only its last output, which no one operator's oracle gives
        raise ManifestError(f"{folder}: --layers: operators {patched[0]}-{patched[-1]} run band by band (--patch) and "
                            "their outputs are not traced one by one; verify without --layers")
    model_path = folder / manifest.model.file
    model, data = load_model(model_path), model_path.read_bytes()
    shapes = manifest.model.input_shapes
    dtypes = io_dtypes(model)
    drawn = (read_input_files(input_files, shapes, dtypes[0]) if input_files
             else draw_inputs(shapes, n_inputs, seed, dtypes[0]))
    expected = oracle_outputs(model, data, drawn)
    inputs = [(label, xs) for (label, xs), case in zip(drawn, expected) if case.outputs is not None]
    wants = [list(case.outputs) for case in expected if case.outputs is not None]
    unchecked = tuple(f"{label}: {_model_oracle(model)} failed on it: {case.failure}"
                      for (label, _), case in zip(drawn, expected) if case.outputs is None)
    if save_to is not None:
        save_vectors(Path(save_to), model, data, inputs, wants)
    if not inputs:
        return VerifyOutcome(manifest, (), oracle=_model_oracle(model), unchecked=unchecked)
    results: list[Inference] = []

    def done(index: int, output: RunOutput) -> None:
        results.append(_inference(inputs[index][0], output))
        if progress is not None:
            progress(results[-1])

    with tempfile.TemporaryDirectory(prefix="edgetune-model-verify-") as tmp:
        try:
            module = _build(folder, manifest, target, Path(tmp) / "whole", None, dtypes)
            runs = tuple(_inference_run(manifest, model, label, x, want) for (label, x), want in zip(inputs, wants))
            _ran_to_the_end(_measure(module, runs, Path(tmp) / "whole", done))
            layer_problem = _layers(folder, manifest, target, model, inputs, Path(tmp) / "layers") if layers else ""
        except ModuleFailure as exc:
            return VerifyOutcome(manifest, tuple(results), str(exc), oracle=_model_oracle(model), unchecked=unchecked)
    return VerifyOutcome(manifest, tuple(results), layer_problem, module.size, _model_oracle(model), unchecked)
