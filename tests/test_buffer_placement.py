"""Buffer placement as a tunable parameter (codegen/placement.py): which memory region holds
a workload's weights and which its activations, offered where the HAL lists more than one
region for buffers, measured in QEMU and over the serial protocol, priced by the cost model,
and exported as section macros plus a linker-script fragment."""
from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import KERNELS, get_kernel
from edgetune.codegen.manifest import write_manifest
from edgetune.codegen.placement import (ACTIVATIONS_PARAM, GUARD_BYTES, WEIGHTS_PARAM, PlacementError, check_regions,
                                        group_bytes, placement_of)
from edgetune.hal import Placement, TargetError, load_target
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, search_space, tune, workload_inputs, workload_of
from edgetune.targets import elf, get_target, iobuf, target_file
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError, run_tool
from edgetune.tuner import Bound, Config, Outcome, TuningDatabase

CONFIG = {"tile_m": 2, "tile_n": 8, "unroll_k": 2, "vector": "c", "layout": "rowmajor", "compiler": "gcc", "opt": "O2"}
SHAPE = "m=8,n=8,k=16"


def placements(space) -> set[tuple[str, str]]:
    return {(c[WEIGHTS_PARAM], c[ACTIVATIONS_PARAM]) for c in space}


# --- the space -----------------------------------------------------------------------------
@pytest.mark.parametrize("name, regions", [("cortex-m55", ("dtcm", "sram2")), ("cortex-m4", ("ssram23", "psram")),
                                           ("cortex-m7", ("ssram23", "psram"))])
def test_every_kernel_offers_placement_where_the_board_has_two_regions(name, regions):
    target = get_target(name)
    for kernel in KERNELS.values():
        shape = kernel.parse_shape(kernel.example_shape())
        space = kernel.tuning_space(target, shape)
        assert space.param(WEIGHTS_PARAM).values == regions, kernel.name
        assert space.param(ACTIVATIONS_PARAM).values == regions, kernel.name
        # The default is the rule from before placement was tunable: both in the first region.
        assert (space.param(WEIGHTS_PARAM).default, space.param(ACTIVATIONS_PARAM).default) == (regions[0], regions[0])
        assert {p.name for p in kernel.space(target, shape).params} | {WEIGHTS_PARAM, ACTIVATIONS_PARAM} == set(space.names)


def test_kernels_command_lists_placement_with_the_target_regions():
    code, out = cli("kernels", "--json", "--target", "cortex-m7")
    assert code == 0, out
    for item in json.loads(out):
        assert item["parameters"][WEIGHTS_PARAM]["values"] == ["ssram23", "psram"], item["name"]
        assert item["parameters"][ACTIVATIONS_PARAM]["values"] == ["ssram23", "psram"], item["name"]
    code, out = cli("kernels", "--json", "--target", "host")
    assert code == 0 and not any(WEIGHTS_PARAM in item["parameters"] for item in json.loads(out))


@pytest.mark.parametrize("name", ["host", "cortex-a53"])
def test_no_placement_where_the_board_has_one_region_or_none(name):
    target = get_target(name)
    kernel = get_kernel("matmul_s8")
    shape = kernel.parse_shape(SHAPE)
    assert kernel.tuning_space(target, shape).names == kernel.space(target, shape).names
    one = load_target(target_file("cortex-m55"), overrides={"firmware": {"io_regions": ["sram2"]}})
    assert WEIGHTS_PARAM not in kernel.tuning_space(one, shape).names


def test_the_space_never_offers_a_placement_that_does_not_fit():
    # DTCM shrunk to 4 KiB for buffers: the weights (2176 bytes) or the activations (about
    # 3.2 KiB) fit there alone, never both; SRAM2 holds anything.
    tight = load_target(target_file("cortex-m55"), overrides={"firmware": {"data_reserved": 0x80000 - 4096}})
    kernel = get_kernel("matmul_s8")
    shape = kernel.parse_shape("m=32,n=32,k=64")
    weights, activations = group_bytes(kernel.make_io(shape, np.random.default_rng(0)))
    assert weights <= 4096 and activations <= 4096 < weights + activations
    space = kernel.tuning_space(tight, shape)
    assert placements(space) == {("sram2", "sram2"), ("dtcm", "sram2"), ("sram2", "dtcm")}
    assert (space.param(WEIGHTS_PARAM).default, space.param(ACTIVATIONS_PARAM).default) == ("sram2", "sram2")
    illegal = space.make({**CONFIG, WEIGHTS_PARAM: "dtcm", ACTIVATIONS_PARAM: "dtcm"})
    assert "must fit the regions" in space.violation(illegal)


def test_configurations_stored_without_placement_take_its_default(m55, matmul):
    shape = matmul.parse_shape(SHAPE)
    space = matmul.tuning_space(m55, shape)
    old = space.make(CONFIG)  # as stored before placement was tunable
    assert (old[WEIGHTS_PARAM], old[ACTIVATIONS_PARAM]) == ("dtcm", "dtcm")
    assert space.index_of(CONFIG) == space.index_of({**CONFIG, WEIGHTS_PARAM: "dtcm", ACTIVATIONS_PARAM: "dtcm"})
    assert placement_of(m55, matmul.make_io(shape, np.random.default_rng(0)), Config(tuple(CONFIG.items()))) \
        == Placement("dtcm", "dtcm")


def test_placement_is_searched_only_when_the_objective_or_a_bound_sees_it(m55, matmul):
    shape = matmul.parse_shape(SHAPE)
    assert placements(search_space(matmul, m55, shape, "instructions")) == {("dtcm", "dtcm")}
    assert len(search_space(matmul, m55, shape, "instructions")) == len(matmul.space(m55, shape))
    every = {(w, a) for w in ("dtcm", "sram2") for a in ("dtcm", "sram2")}
    assert placements(search_space(matmul, m55, shape, "cycles")) == every
    assert placements(search_space(matmul, m55, shape, "instructions", (Bound("energy_uj", 1.0),))) == every
    assert m55.placement_values == ("cycles", "energy_uj", "power_mw")
    assert get_target("an547-serial").placement_values[0] == "cycles" and get_target("host").placement_values == ()


def test_every_kernel_marks_weights_and_keeps_the_marks_in_deployed_buffers(m55):
    for kernel in KERNELS.values():
        shape = kernel.parse_shape(kernel.example_shape())
        io = kernel.make_io(shape, np.random.default_rng(0))
        marks = [b.weight for b in io.buffers]
        assert any(marks) and not any(b.weight and b.is_output for b in io.buffers), kernel.name
        seen = set()
        for config in kernel.space(m55, shape):
            variant = tuple((p.name, config[p.name]) for p in kernel.space(m55, shape).params
                            if p.name in ("layout", "vector", "algo", "fusion"))
            if variant in seen:
                continue
            seen.add(variant)
            assert [b.weight for b in kernel.deployed_io(io, config).buffers] == marks, (kernel.name, variant)


# --- names that reach C and linker scripts --------------------------------------------------
@pytest.mark.parametrize("bad", ["d-tcm", "dtcm.0", "DTCM", "x" * 33])
def test_region_names_must_be_c_identifiers(tmp_path, bad):
    text = open(target_file("cortex-m55")).read().replace('name = "sram2"', f'name = "{bad}"') \
        .replace('io_regions = ["dtcm", "sram2"]', f'io_regions = ["dtcm", "{bad}"]')
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(TargetError, match=r"memory\[3\]\.name"):
        load_target(path)


@pytest.mark.parametrize("bad", ["itcm", "sram2;", "sram2\")));", "qspi", 3])
def test_only_regions_the_hal_offers_for_buffers_pass(m55, bad):
    with pytest.raises(PlacementError, match="is not a memory region cortex-m55 places buffers in"):
        check_regions(m55, ["dtcm", bad], "manifest")
    with pytest.raises(PlacementError):
        placement_of(m55, get_kernel("matmul_s8").make_io({"m": 2, "n": 2, "k": 2}, np.random.default_rng(0)),
                     Config(((WEIGHTS_PARAM, bad),)))


def test_an_export_manifest_naming_a_foreign_region_is_refused(m55, matmul, tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    shape = matmul.parse_shape(SHAPE)
    entry = {"kernel": "matmul_s8", "kernel_version": matmul.version, "shape": shape, "function": "k",
             "source": "k.c", "compiler_command": "arm-none-eabi-gcc", "cflags": ["-O2"],
             "config": {**CONFIG, WEIGHTS_PARAM: "itcm", ACTIVATIONS_PARAM: "dtcm"}}
    write_manifest(folder, {"manifest_version": 1, "target": m55.name, "objective": "cycles", "files": {},
                            "dispatch": {"source": "d.c", "compiler_command": "arm-none-eabi-gcc", "cflags": []},
                            "kernels": [entry]})  # checksummed: only the region name is wrong
    io = matmul.make_io(shape, np.random.default_rng(0))
    with pytest.raises(MeasureError, match="'itcm' is not a memory region"):
        runner_for(m55).build_export(matmul, shape, io, folder, tmp_path)


# --- the I/O block in segments --------------------------------------------------------------
def test_split_block_keeps_the_header_with_the_activations_and_the_weights_apart(m55, matmul):
    io = matmul.make_io(matmul.parse_shape(SHAPE), np.random.default_rng(4))
    plan = iobuf.plan_io(m55, io, Placement("sram2", "dtcm"))
    assert plan.regions == ("dtcm", "sram2") and plan.segment_of == (0, 1, 1, 0)
    first, second = iobuf.pack_segments(io, plan)
    magic, version, n_buffers, n_params = struct.unpack_from("<4I", first)
    assert (magic, version, n_buffers, n_params) == (iobuf.MAGIC, 2, 4, 5)
    offsets = iobuf.layout(io, plan)
    for i, buf in enumerate(io.buffers):
        segment, offset, size, is_output = struct.unpack_from("<4I", first, 16 + 16 * i)
        assert (segment, offset, size, is_output) == (plan.segment_of[i], offsets[i], buf.data.nbytes, int(buf.is_output))
        if not buf.is_output:
            data = (first, second)[segment][offset:offset + size]
            assert data == np.ascontiguousarray(buf.data).astype(buf.data.dtype.newbyteorder("<")).tobytes()
    # The same bytes split in two; the second segment closes with a guard of its own.
    assert len(first) + len(second) == iobuf.block_size(io) + GUARD_BYTES
    assert iobuf.plan_io(m55, io, Placement("dtcm", "dtcm")).regions == ("dtcm",)


def test_a_segment_larger_than_its_region_is_too_large(matmul):
    tight = load_target(target_file("cortex-m55"), overrides={"firmware": {"data_reserved": 0x80000 - 4096}})
    io = matmul.make_io(matmul.parse_shape("m=64,n=64,k=64"), np.random.default_rng(0))
    # b (4096 bytes) and bias (256), each after its 16 guard bytes, and the segment's closing guard.
    with pytest.raises(MeasureError, match="weights of 4400 bytes exceed the 4096 bytes cortex-m55 has free in dtcm") as exc:
        iobuf.plan_io(tight, io, Placement("dtcm", "sram2"))
    assert exc.value.outcome is Outcome.TOO_LARGE


# --- measured -------------------------------------------------------------------------------
def measure(kernel, target, shape_text, values, tmp_path):
    shape = kernel.parse_shape(shape_text)
    space = kernel.tuning_space(target, shape)
    io = workload_inputs(kernel, workload_of(kernel, target, shape))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Evaluator(kernel, target, shape, space, io, work)(space.make(values))


@pytest.mark.qemu
def test_weights_in_psram_cost_cycles_not_instructions_on_the_m7(matmul, tmp_path):
    m7 = get_target("cortex-m7")
    trials = {(w, a): measure(matmul, m7, SHAPE, {**CONFIG, WEIGHTS_PARAM: w, ACTIVATIONS_PARAM: a}, tmp_path)
              for w, a in (("ssram23", "ssram23"), ("psram", "ssram23"), ("psram", "psram"))}
    for (w, a), trial in trials.items():
        assert trial.outcome is Outcome.OK, trial.error
        assert (trial.info["weights_region"], trial.info["activations_region"]) == (w, a)
    fast, slow, slowest = (trials[k].values for k in (("ssram23", "ssram23"), ("psram", "ssram23"), ("psram", "psram")))
    assert fast["instructions"] == slow["instructions"] == slowest["instructions"]
    assert fast["mix"] == slow["mix"] and sum(fast["accesses"].values()) == sum(slow["accesses"].values())
    assert "psram" not in fast["accesses"] and slow["accesses"]["psram"] > 0
    assert slowest["accesses"]["psram"] > slow["accesses"]["psram"]
    # Every load of B and bias now waits PSRAM's wait states (3, an estimate in the TOML).
    psram = m7.region("psram")
    assert slow["cycles"] == pytest.approx(fast["cycles"] + slow["accesses"]["psram"] * psram.wait_states, abs=0.2)
    assert fast["cycles"] < slow["cycles"] < slowest["cycles"]
    assert fast["energy_uj"] < slow["energy_uj"] < slowest["energy_uj"]


@pytest.mark.qemu
def test_tuning_cycles_finds_the_fast_placement_and_records_it(matmul, tmp_path):
    m7 = get_target("cortex-m7")
    shape = matmul.parse_shape(SHAPE)
    db = TuningDatabase(tmp_path / "p.db")
    initial = tuple({**CONFIG, WEIGHTS_PARAM: w, ACTIVATIONS_PARAM: a} for w in ("psram", "ssram23")
                    for a in ("psram", "ssram23"))
    summary = tune(TuneRequest(matmul, m7, shape, "random", 4, 2, 0, objective="cycles", initial=initial), db)
    assert summary.trials == 4 and summary.failed == 0
    best = summary.best.trial
    assert (best.config[WEIGHTS_PARAM], best.config[ACTIVATIONS_PARAM]) == ("ssram23", "ssram23")
    assert len({t.values["instructions"] for t in db.trials(summary.workload)}) == 1


@pytest.mark.qemu
def test_serial_board_runs_weights_and_activations_in_different_regions(matmul, tmp_path):
    board = get_target("an547-serial")
    trial = measure(matmul, board, "m=4,n=8,k=8", {**CONFIG, WEIGHTS_PARAM: "sram2", ACTIVATIONS_PARAM: "dtcm"}, tmp_path)
    assert trial.outcome is Outcome.OK, trial.error
    assert (trial.info["weights_region"], trial.info["activations_region"]) == ("sram2", "dtcm")
    assert trial.values["cycles"] > 0


# --- exported -------------------------------------------------------------------------------
def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.mark.qemu
def test_export_says_where_buffers_go_and_is_measured_there(matmul, tmp_path):
    m7 = get_target("cortex-m7")
    shape = matmul.parse_shape(SHAPE)
    db_path = tmp_path / "e.db"
    config = {**CONFIG, WEIGHTS_PARAM: "psram", ACTIVATIONS_PARAM: "ssram23"}
    summary = tune(TuneRequest(matmul, m7, shape, "random", 1, 1, 0, objective="cycles", initial=(config,)),
                   TuningDatabase(db_path))
    assert summary.best.trial.info["weights_region"] == "psram"
    folder = tmp_path / "export"
    code, out = cli("export", "--target", "cortex-m7", "--out", folder, "--db", db_path)
    assert code == 0, out
    fn = matmul.function_name(shape)
    header = (folder / "edgetune_kernels.h").read_text()
    assert f'#define EDGETUNE_{fn.upper()}_WEIGHTS_SECTION __attribute__((section(".edgetune.psram"), aligned(16)))' in header
    assert f'#define EDGETUNE_{fn.upper()}_ACTIVATIONS_SECTION __attribute__((section(".edgetune.ssram23"), aligned(16)))' in header
    fragment = (folder / "edgetune_sections.ld").read_text()
    psram, ssram = m7.region("psram"), m7.region("ssram23")
    # The fragment names no address: the firmware's own linker script says where each region is.
    assert not re.search(r"^\s*MEMORY\b", fragment, re.M) and "ORIGIN" not in fragment
    assert re.search(r"\} > EDGETUNE_PSRAM\n", fragment) and re.search(r"\} > EDGETUNE_SSRAM23\n", fragment)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["kernels"][0]["placement"] == {"weights": "psram", "activations": "ssram23"}

    # Built as exported, the variant finds its weights in PSRAM (the cost model sees them there).
    io = workload_inputs(matmul, workload_of(matmul, m7, shape))
    runner = runner_for(m7)
    build = runner.build_export(matmul, shape, io, folder, tmp_path)
    values, _ = runner.run(build, io)
    assert values["accesses"]["psram"] == summary.best.trial.values["accesses"]["psram"] > 0
    code, out = cli("verify", folder, "--target", "cortex-m7", "--json")
    assert code == 0, out

    # Firmware that declares its buffers with the macros and includes the fragment links them
    # into the regions the variant was measured with.
    (tmp_path / "app.c").write_text(
        f'#include "edgetune_kernels.h"\n'
        f"int8_t b_weights[{shape['k'] * shape['n']}] EDGETUNE_{fn.upper()}_WEIGHTS_SECTION;\n"
        f"int8_t c_output[{shape['m'] * shape['n']}] EDGETUNE_{fn.upper()}_ACTIVATIONS_SECTION;\n"
        "int main(void) { b_weights[0] = 1; c_output[0] = b_weights[0]; return c_output[0]; }\n"
        "void et_reset_handler(void) { main(); for (;;) {} }\n")
    (tmp_path / "app.ld").write_text(
        f"MEMORY {{ CODE (rx) : ORIGIN = 0x{m7.region('ssram1').base:x}, LENGTH = 0x100000\n"
        f"         SSRAM (rw) : ORIGIN = 0x{ssram.base:x}, LENGTH = 0x{ssram.size:x}\n"
        f"         PSRAM (rw) : ORIGIN = 0x{psram.base:x}, LENGTH = 0x{psram.size:x} }}\n"
        'REGION_ALIAS("EDGETUNE_PSRAM", PSRAM);\nREGION_ALIAS("EDGETUNE_SSRAM23", SSRAM);\n'
        "SECTIONS {\n .text : { *(.text .text.*) *(.rodata .rodata.*) } > CODE\n"
        " .bss (NOLOAD) : { *(.bss .bss.* COMMON) } > SSRAM\n INCLUDE edgetune_sections.ld\n}\n")
    gcc = m7.compiler("gcc")
    run_tool([gcc.command, *gcc.cflags, "-O2", "-I", str(folder), "-nostartfiles", "-T", "app.ld", "-L", str(folder),
              "app.c", "-o", "app.elf"], cwd=tmp_path)
    symbols = elf.symbols(tmp_path / "app.elf")
    assert psram.base <= symbols["b_weights"] < psram.end
    assert ssram.base <= symbols["c_output"] < ssram.end
    assert re.search(r"\.edgetune\.psram\s+\(NOLOAD\)", fragment)
