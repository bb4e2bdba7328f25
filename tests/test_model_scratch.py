"""The tuned layers' scratch in a model module (codegen/scratch.py, app/model/module.py,
app/model/memory_plan.py): each layer's scratch is planned into the arena by lifetime (alive
during its own step) and reached through the variant's own pointer, set before each call;
buffers a template keeps out of the arena share one static area `<name>_scratch`, sized by
the largest need and not the sum; a kernel rendered alone (the tuning harness, `edgetune
export`) keeps its own static arrays, text for text. The module run in QEMU against TFLite
Micro, layer by layer: tests/test_model_qemu.py and below."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import KERNELS
from edgetune.codegen.export import ExportEntry
from edgetune.model import load_model
from edgetune.model.memory_plan import check_plan
from edgetune.model.module import render_model_module
from edgetune.codegen.scratch import ScratchError, ScratchLayout, shared_scratch
from edgetune.export import export_best
from edgetune.model.export import export_model
from edgetune.model.verify import verify_model
from edgetune.session import TuneRequest, tune
from edgetune.targets import elf, get_target
from edgetune.tuner import TuningDatabase

MODELS = Path(__file__).parent / "data" / "models"
DS_CNN = MODELS / "ds_cnn_kws.tflite"
MOBILENET = MODELS / "mobilenet_v1_025_vww.tflite"
# A static array of a variant's own (not a const table): what a shared module must not keep.
OWN_ARRAY = re.compile(r"^static (?:int8_t|int32_t|float) \w+\[", re.M)


def _largest_scratch(kernel, target, shape, wanted: dict):
    """The configuration matching `wanted` with the most static scratch."""
    matching = [c for c in kernel.tuning_space(target, shape) if all(c.as_dict().get(k) == v for k, v in wanted.items())]
    return max(matching, key=lambda c: kernel.render(target, shape, c).scratch_bytes)


def _wanted(target, kernel: str) -> dict:
    if target.name == "host":
        return {"algo": "im2col"} if kernel == "conv2d_s8" else {"taps": "padded3x3"}
    return {"vector": "mve", "layout": "packed", **({"algo": "im2col"} if kernel == "conv2d_s8" else {})}


def _chosen(model, target) -> dict:
    """Every workload on its scratch-heaviest variant of the target's vector path."""
    chosen = {}
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        config = _largest_scratch(kernel, target, shape, _wanted(target, w.kernel))
        chosen[(w.kernel, w.shape)] = ExportEntry(kernel=kernel.name, kernel_version=kernel.version,
                                                  shape=tuple(shape.items()), config=config.items,
                                                  objective="instructions", value=1.0, values=(), trial_id=1,
                                                  created="", trials=1)
    return chosen


def _alone(model, target, chosen) -> dict[str, int]:
    """Each variant's scratch rendered alone, by the module's function names."""
    needs = {}
    for layer in model.layers:
        if layer.kernel is None or (layer.kernel, layer.shape) not in chosen:
            continue
        kernel = KERNELS[layer.kernel]
        shape = kernel.parse_shape(layer.shape_dict)
        entry = chosen[(layer.kernel, layer.shape)]
        config = kernel.tuning_space(target, shape).make(dict(entry.config))
        fn = f"ds_cnn_kws_{layer.kernel}_l{layer.index}"
        needs.setdefault((layer.kernel, layer.shape), (fn, kernel.render(target, shape, config, fn=fn)))
    return {fn: rendered.scratch_bytes for fn, rendered in needs.values()}


@pytest.fixture(scope="module")
def m55_module():
    m55 = get_target("cortex-m55")
    model = load_model(DS_CNN)
    chosen = _chosen(model, m55)
    rendered = render_model_module(model, m55, chosen, name="ds_cnn_kws", database="", date="", version="0",
                                   model_bytes=DS_CNN.read_bytes())
    return m55, model, chosen, rendered


def test_each_layers_scratch_is_planned_into_the_arena_during_its_step(m55_module):
    m55, model, chosen, rendered = m55_module
    alone = {fn: n for fn, n in _alone(model, m55, chosen).items() if n}
    assert len(alone) >= 3  # im2col convolutions and the depthwise ones' copies
    plan, steps = rendered.plan, rendered.steps
    planned = plan.scratch
    assert {steps[n].function for n in planned} == set(alone)
    for n, a in planned.items():
        assert a.nbytes == alone[steps[n].function] and (a.first, a.last) == (n, n) and a.offset % 16 == 0
        assert a.end <= plan.arena_bytes
    in_place = {a.tensor: a.shares for a in plan.allocations if a.shares is not None}
    assert check_plan(plan, (), in_place) == []
    # Beside the tensors alive at its step, never on them (an in-place pair is one tensor's bytes).
    for n, a in planned.items():
        for t in plan.tensors:
            if t.first <= n <= t.last:
                assert a.end <= t.offset or t.end <= a.offset, (n, t)
    # Nothing static left: every buffer of these variants goes to the arena.
    assert rendered.scratch.nbytes == 0 and "_scratch[" not in rendered.files["ds_cnn_kws.c"]
    assert "#define DS_CNN_KWS_SCRATCH_BYTES 0u" in rendered.files["ds_cnn_kws.h"]
    assert rendered.arena_scratch.nbytes == max(alone.values())
    assert rendered.arena_scratch.unshared == sum(alone.values())
    source = rendered.files["ds_cnn_kws.c"]
    for n, a in planned.items():
        assert f"{steps[n].function}_scratch_at(arena + {a.offset}u);" in source
    for fn in alone:
        variant = rendered.files[f"{fn}.c"]
        assert not OWN_ARRAY.search(variant), fn
        assert f"static uint8_t *{fn}_scratch;" in variant
        for offset in map(int, re.findall(rf"\({fn}_scratch \+ (\d+)\)", variant)):
            assert offset % 16 == 0 and offset < alone[fn]


def test_the_arena_with_scratch_is_below_the_arena_beside_one_static_area(m55_module):
    """What the planning gains here: the arena holding every layer's scratch is smaller than
    the tensors' arena plus the static area of the largest need (the module before)."""
    m55, model, chosen, rendered = m55_module
    from edgetune.model.module import memory_plan
    tensors_only = memory_plan(model, rendered.steps).arena_bytes
    assert rendered.plan.arena_bytes < tensors_only + rendered.arena_scratch.nbytes


def test_a_module_without_scratch_defines_no_area(tmp_path):
    # No database: every layer on its kernel's default configuration, on a core without Helium
    # plain C direct loops, no scratch (on the M55 the depthwise default is the pixel-lane
    # Helium path, whose channel plane is scratch).
    result = export_model(DS_CNN, get_target("cortex-m4"), None, tmp_path / "m")
    assert result.rendered.scratch.nbytes == 0
    assert "_scratch[" not in result.rendered.files["ds_cnn_kws.c"]
    assert "#define DS_CNN_KWS_SCRATCH_BYTES 0u" in result.rendered.files["ds_cnn_kws.h"]


def test_a_variant_rendered_alone_keeps_its_own_static_arrays(m55_module):
    """The tuning harness and `edgetune export` render variants alone: the static arrays they
    always declared, in the scratch section, and nothing of a module's."""
    m55, model, chosen, _ = m55_module
    for (name, shape_key), entry in chosen.items():
        kernel = KERNELS[name]
        shape = kernel.parse_shape(dict(shape_key))
        rendered = kernel.render(m55, shape, kernel.tuning_space(m55, shape).make(dict(entry.config)))
        if rendered.scratch_bytes:
            assert OWN_ARRAY.search(rendered.source) and "_scratch +" not in rendered.source
            assert '__attribute__((section(".edgetune.dtcm.scratch")));' in rendered.source


def test_the_layout_places_each_buffer_after_the_last_on_its_alignment():
    shared = ScratchLayout("", "m_scratch")  # no pointer: every buffer in the static area
    first = shared.array("int8_t", "f_col", "F_K", 9)
    shared.array("int32_t", "f_acc", "F_N", 5)
    shared.array("float", "f_pack", "F_P", 3, 64)
    assert [b.offset for b in shared.buffers] == [0, 16, 64]
    assert shared.nbytes == 64 + 12 and shared.align == 64
    assert first.startswith("extern uint8_t m_scratch[];") and "#define f_col ((int8_t *)(m_scratch + 0))" in first
    own = ScratchLayout(' __attribute__((section(".s")))')
    assert own.array("float", "f_pack", "F_P", 3, 64) == \
        'static float f_pack[F_P] __attribute__((aligned(64))) __attribute__((section(".s")));'
    with pytest.raises(ScratchError):
        shared.array("int8_t", "f col", "1", 1)
    with pytest.raises(ScratchError):
        ScratchLayout("", "m-scratch")
    assert shared_scratch({}).nbytes == 0


def test_the_layout_puts_buffers_in_the_arena_unless_the_template_keeps_them_static():
    layout = ScratchLayout("", "m_scratch", "f_scratch")
    first = layout.array("int8_t", "f_col", "F_K", 9)
    static = layout.array("int32_t", "f_terms", "F_T", 4, 16, arena=False)
    layout.array("int32_t", "f_acc", "F_N", 5)
    assert first.startswith("/* This layer's scratch in the module's arena") and "static uint8_t *f_scratch;" in first
    assert "void f_scratch_at(uint8_t *area) { f_scratch = area; }" in first
    assert "#define f_col ((int8_t *)(f_scratch + 0))" in first
    assert static.startswith("extern uint8_t m_scratch[];") and "#define f_terms ((int32_t *)(m_scratch + 0))" in static
    assert [(b.offset, b.in_arena) for b in layout.buffers] == [(0, True), (0, False), (16, True)]
    assert (layout.arena_nbytes, layout.nbytes) == (36, 16)
    with pytest.raises(ScratchError):
        ScratchLayout("", "", "f_scratch")
    area = shared_scratch({"a": (100, 16), "b": (300, 64), "c": (0, 16)})
    assert (area.nbytes, area.align, area.largest, area.users, area.unshared) == (300, 64, "b", 2, 400)


@pytest.mark.qemu
def test_the_built_module_keeps_only_the_layers_scratch_pointers_as_writable_data(m55_module, tmp_path):
    """Built with the export's own Make fragment for the M55: the module's writable data (the
    static arena's object left out, as verify leaves it out) is one pointer per variant with
    scratch, no scratch arrays: their bytes are the arena's."""
    m55, model, chosen, rendered = m55_module
    folder = tmp_path / "m"
    folder.mkdir()
    for name, text in rendered.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)  # zephyr/ holds the Zephyr module's files
        (folder / name).write_text(text)
    (tmp_path / "Makefile").write_text("include $(EDGETUNE_DIR)/edgetune_kernels.mk\nall: $(EDGETUNE_OBJECTS)\n")
    subprocess.run(["make", "-s", "all", f"EDGETUNE_DIR={folder}", f"EDGETUNE_BUILD_DIR={tmp_path / 'obj'}"],
                   cwd=tmp_path, check=True, capture_output=True)
    objects = [o for o in (tmp_path / "obj").glob("*.o") if o.stem != "ds_cnn_kws_arena"]
    table = subprocess.run(["arm-none-eabi-nm", "-S", *map(str, objects)], capture_output=True, text=True,
                           check=True).stdout
    writable = sorted((int(size, 16), symbol) for _, size, _, symbol in
                      (line.split() for line in table.splitlines() if re.search(r" [bBdD] ", line)))
    alone = {fn for fn, n in _alone(model, m55, chosen).items() if n}
    assert writable == sorted((4, f"{fn}_scratch") for fn in alone)
    assert sum(elf.ram_bytes(o) for o in objects) == 4 * len(alone)


def _host_db(root: Path, host, model) -> TuningDatabase:
    db = TuningDatabase(root / "host.db")
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        config = _largest_scratch(kernel, host, shape, _wanted(host, w.kernel)).as_dict()
        tune(TuneRequest(kernel, host, shape, "random", 1, 1, 0, initial=(config,)), db)
    return db


def test_a_module_with_scratch_in_the_arena_runs_natively_bit_exact_layer_by_layer(tmp_path):
    """On the host: im2col convolutions and padded depthwise copies each in the bytes of the
    arena free during its layer, every operator TFLite Micro's; the module's RAM is the arena,
    the I/O and the scratch pointers (8 bytes each on the host), no scratch array."""
    host = get_target("host")
    model = load_model(DS_CNN)
    result = export_model(DS_CNN, host, _host_db(tmp_path, host, model), tmp_path / "m")
    rendered = result.rendered
    assert len(rendered.plan.scratch) >= 3 and rendered.arena_scratch.unshared > rendered.arena_scratch.nbytes
    assert rendered.scratch.nbytes == 0
    outcome = verify_model(tmp_path / "m", host, 2, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])
    io = sum(int(np.prod(shape)) for shape in (*outcome.manifest.model.input_shapes, *outcome.manifest.model.output_shapes))
    assert outcome.size.ram_bytes - outcome.manifest.model.arena_bytes - io <= 8 * rendered.arena_scratch.users


def test_a_single_kernel_export_with_scratch_still_builds_alone(tmp_path):
    """`edgetune export` of an im2col convolution: its source keeps its own static scratch and
    builds and links with a user's program on the host, with no module around it."""
    host = get_target("host")
    kernel = KERNELS["conv2d_s8"]
    shape = kernel.parse_shape("h=8,w=8,cin=8,cout=8,kh=3,kw=3,stride=1,pad=1,dilation=1")
    config = _largest_scratch(kernel, host, shape, {"algo": "im2col"})
    db = TuningDatabase(tmp_path / "t.db")
    tune(TuneRequest(kernel, host, shape, "random", 1, 1, 0, initial=(config.as_dict(),)), db)
    result = export_best(db, host, tmp_path / "export")
    (entry,) = result.entries
    source = (result.folder / entry.source).read_text()
    assert OWN_ARRAY.search(source) and "_scratch" not in source.replace("scratch memory", "")
    (tmp_path / "main.c").write_text('#include "edgetune_kernels.h"\nint main(void) { return 0; }\n')
    sources = [str(p) for p in result.folder.glob("*.c")]
    subprocess.run(["cc", "-O2", "-I", str(result.folder), str(tmp_path / "main.c"), *sources, "-o",
                    str(tmp_path / "app")], check=True, capture_output=True)
    table = subprocess.run(["nm", str(tmp_path / "app")], capture_output=True, text=True, check=True).stdout
    assert re.search(r" [bd] \w*_col$", table, re.M)  # the variant's own im2col buffer, a local symbol


def _with_buffers(kernel, target, shape, names: set[str]):
    """The first configuration whose scratch is exactly the buffers `names` (suffixes)."""
    for config in kernel.tuning_space(target, shape):
        rendered = kernel.render(target, shape, config, shared_scratch="probe")
        placed = set(re.findall(rf"#define {rendered.function}(_\w+) \(\(", rendered.source))
        if placed == names:
            return config
    raise AssertionError(f"no {kernel.name} variant with scratch {sorted(names)}")


@pytest.mark.qemu
def test_every_kind_of_scratch_shares_the_area_bit_exact_on_the_m55(tmp_path):
    """DS-CNN on the M55 with the convolutions on Helium im2col with unfused accumulators and
    precomputed weight sums, the depthwise layer on mve_pixels (its plane, accumulators and
    terms): each variant's buffers in the same bytes one layer after another, every operator
    TFLite Micro's."""
    m55 = get_target("cortex-m55")
    model = load_model(DS_CNN)
    wanted = {"conv2d_s8": {"_acc", "_col", "_wsum"}, "dwconv2d_s8": {"_acc", "_plane", "_terms"}}
    db = TuningDatabase(tmp_path / "t.db")
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        config = _with_buffers(kernel, m55, shape, wanted[w.kernel]).as_dict()
        tune(TuneRequest(kernel, m55, shape, "random", 1, 1, 0, initial=(config,)), db)
    printed = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--target", "cortex-m55", "--db", str(db.path),
                                        "--out", str(tmp_path / "m")])
    assert printed.exit_code == 0, printed.output
    header = (tmp_path / "m" / "ds_cnn_kws.h").read_text()
    shared = int(re.search(r"#define DS_CNN_KWS_SCRATCH_BYTES (\d+)u", header)[1])
    # mve_pixels keeps its buffers static (its template says why); the convolutions' go to the arena.
    assert f"static scratch beside the arena: {shared:,} bytes, one area for 1 variants" in printed.output
    assert re.search(r"scratch in the arena: \d+ layers' scratch planned by lifetime", printed.output)
    outcome = verify_model(tmp_path / "m", m55, 2, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])


def _first(kernel, target, shape, wanted: dict):
    return next(c for c in kernel.tuning_space(target, shape) if all(c.as_dict().get(k) == v for k, v in wanted.items()))


IN_PLACE_CASES = {
    "unfused convolutions, depthwise channel by channel": {
        "conv2d_s8": {"vector": "mve", "fusion": "unfused", "algo": "im2col"}, "dwconv2d_s8": {"vector": "mve_pixels"}},
    "fused pointwise convolutions, depthwise on a padded copy": {
        "conv2d_s8": {"vector": "mve", "fusion": "fused", "algo": "im2col"},
        "dwconv2d_s8": {"vector": "mve", "taps": "padded3x3"}},
}


@pytest.mark.qemu
@pytest.mark.slow
@pytest.mark.parametrize("case", IN_PLACE_CASES)
def test_layers_that_write_over_their_input_are_bit_exact_on_the_m55(tmp_path, case):
    """The oracle's proof of each in-place family (KernelBase.in_place_mode): DS-CNN on the
    M55 with every layer of the family at its input's offset, each operator's output
    compared with TFLite Micro's, on random and saturating inputs."""
    m55 = get_target("cortex-m55")
    model = load_model(DS_CNN)
    db = TuningDatabase(tmp_path / "t.db")
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        config = _first(kernel, m55, shape, IN_PLACE_CASES[case][w.kernel]).as_dict()
        tune(TuneRequest(kernel, m55, shape, "random", 1, 1, 0, initial=(config,)), db)
    result = export_model(DS_CNN, m55, db, tmp_path / "m")
    plan, steps = result.rendered.plan, result.rendered.steps
    by = plan.by_tensor()  # the model's input and output are the caller's buffers, not the arena's
    over = [s for s in steps if s.kernel is not None and s.in_place and s.inputs[0] in by and s.outputs[0] in by]
    ops = {s.op for s in over}
    assert {"DEPTHWISE_CONV_2D", "CONV_2D"} <= ops  # both families of the case take part
    for s in over:
        assert plan.offset(s.outputs[0]) == plan.offset(s.inputs[0]), s
    outcome = verify_model(tmp_path / "m", m55, 2, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])


@pytest.mark.qemu
@pytest.mark.slow
def test_pointwise_layers_that_grow_end_where_their_input_ends_bit_exact_on_the_m55(tmp_path):
    """MobileNet's fused Helium pointwise layers that widen (8 -> 16 channels...) are written
    in pixel order ending where their input ends; with its depthwise layers in place, every
    operator compared with TFLite Micro's."""
    m55 = get_target("cortex-m55")
    model = load_model(MOBILENET)
    wanted = {"conv2d_s8": {"vector": "mve", "fusion": "fused", "algo": "im2col"}, "dwconv2d_s8": {"vector": "mve_pixels"}}
    db = TuningDatabase(tmp_path / "t.db")
    for w in model.workloads():
        kernel = KERNELS[w.kernel]
        shape = kernel.parse_shape(dict(w.shape))
        tune(TuneRequest(kernel, m55, shape, "random", 1, 1, 0,
                         initial=(_first(kernel, m55, shape, wanted[w.kernel]).as_dict(),)), db)
    result = export_model(MOBILENET, m55, db, tmp_path / "m")
    plan, steps = result.rendered.plan, result.rendered.steps
    by = plan.by_tensor()
    grown = [s for s in steps if s.op == "CONV_2D" and s.inputs[0] in by and s.outputs[0] in by
             and by[s.outputs[0]].nbytes > by[s.inputs[0]].nbytes and by[s.outputs[0]].shares == s.inputs[0]]
    assert grown  # the 48x48 8 -> 16 layer among them
    for s in grown:
        out, source = by[s.outputs[0]], by[s.inputs[0]]
        assert out.offset < source.offset and 0 <= source.end - out.end < 16, s
    outcome = verify_model(tmp_path / "m", m55, 1, layers=True)
    assert outcome.ok, (outcome.layer_problem, [i.problem for i in outcome.inferences])
