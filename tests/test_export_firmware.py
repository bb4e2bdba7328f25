"""An export built as a user's firmware builds it, without edgetune: the user's own start-up
code and linker script (defining the EDGETUNE_* region names), with CMake through
edgetune_kernels.cmake and with Make through edgetune_kernels.mk, for the Cortex-M55 with
arm-none-eabi-gcc; the image runs in QEMU and computes what numpy computes, every buffer
and the im2col scratch sit in the region they were measured in, and each kernel object is
the one edgetune measured."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen import get_kernel
from edgetune.session import TuneRequest, tune, workload_inputs, workload_of
from edgetune.targets import get_target
from edgetune.tuner import TuningDatabase
from edgetune.verify import export_and_measure
from zephyr_stand_ins import zephyr_project

pytestmark = pytest.mark.qemu
FIRMWARE = Path(__file__).parent / "data" / "user_firmware_m55"
WORKLOADS = (("matmul_s8", "m=4,n=8,k=12", {"vector": "mve", "layout": "rowmajor", "compiler": "gcc"}),
             ("conv2d_s8", "h=6,w=6,cin=8,cout=8,kh=3,kw=3,stride=1,pad=1,dilation=1",
              {"algo": "im2col", "vector": "mve", "layout": "ohwi", "compiler": "gcc"}))
DTCM = (0x2000_0000, 0x2008_0000)


def _config(kernel, target, shape, wanted):
    space = kernel.tuning_space(target, shape)
    return next(c.as_dict() for c in space if all(c[k] == v for k, v in wanted.items()))


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """An export of a Helium matmul and an im2col convolution (it has static scratch)."""
    root = tmp_path_factory.mktemp("firmware")
    m55 = get_target("cortex-m55")
    db = TuningDatabase(root / "t.db")
    for name, shape_text, wanted in WORKLOADS:
        kernel = get_kernel(name)
        shape = kernel.parse_shape(shape_text)
        tune(TuneRequest(kernel, m55, shape, "random", 1, 1, 0, initial=(_config(kernel, m55, shape, wanted),)), db)
    result = export_and_measure(db, m55, root / "export")
    assert [e.scratch for e in result.entries] == [False, True]
    return root / "export", result


def _array(ctype: str, name: str, data: np.ndarray, attribute: str = "") -> str:
    values = ", ".join(str(int(v)) for v in data.reshape(-1))
    return f"{'static const ' if not attribute else 'static '}{ctype} {name}[{data.size}]{attribute}" + \
        (f" = {{{values}}};" if not attribute else ";")


def _main_c(m55) -> tuple[str, list[np.ndarray]]:
    """main(): each workload's canonical inputs copied from flash into arrays declared with the
    export's section macros, its dispatcher called, every output written to out.bin."""
    lines, calls, outputs, expected = ['#include <stdint.h>', '#include <stddef.h>', '#include "edgetune_kernels.h"',
                                       "int user_write_file(const char *, size_t, const void *, size_t);"], [], [], []
    for index, (name, shape_text, _) in enumerate(WORKLOADS):
        kernel = get_kernel(name)
        shape = kernel.parse_shape(shape_text)
        io = workload_inputs(kernel, workload_of(kernel, m55, shape))
        fn = kernel.function_name(shape).upper()
        args = [str(v) for v in shape.values()]
        for buf in io.buffers:
            group = "WEIGHTS" if buf.weight else "ACTIVATIONS"
            placed = f"w{index}_{buf.name}"
            lines.append(_array(buf.ctype, placed, buf.data, f" EDGETUNE_{fn}_{group}_SECTION"))
            if not buf.is_output:
                lines.append(_array(buf.ctype, f"flash{index}_{buf.name}", buf.data))
                calls.append(f"    for (int i = 0; i < {buf.data.size}; i++) {placed}[i] = flash{index}_{buf.name}[i];")
            else:
                outputs.append((placed, buf.data.nbytes))
            args.append(placed)
        args += [str(int(v)) for _, v in io.params]
        calls.append(f"    if (et_{name}({', '.join(args)}) != 0) return 3;")
        expected += kernel.reference(shape, io)
    lines.append("static uint8_t out[%d];" % sum(n for _, n in outputs))
    body = ["int main(void)", "{", *calls, "    size_t at = 0;"]
    for placed, nbytes in outputs:
        body.append(f"    for (size_t i = 0; i < {nbytes}; i++) out[at++] = ((const uint8_t *){placed})[i];")
    body += ['    return user_write_file("out.bin", 7, out, sizeof out) == 0 ? 0 : 4;', "}"]
    return "\n".join(lines + body) + "\n", expected


def _user_project(tmp_path: Path, m55) -> tuple[Path, list[np.ndarray]]:
    project = tmp_path / "firmware"
    shutil.copytree(FIRMWARE, project)
    text, expected = _main_c(m55)
    (project / "main.c").write_text(text)
    return project, expected


def _run_in_qemu(elf: Path, expected: list[np.ndarray]) -> None:
    proc = subprocess.run(["qemu-system-arm", "-M", "mps3-an547", "-nographic", "-monitor", "none", "-serial", "none",
                           "-semihosting-config", "enable=on,target=native", "-kernel", elf.name],
                          cwd=elf.parent, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = np.frombuffer((elf.parent / "out.bin").read_bytes(), dtype=np.int8)
    want = np.concatenate([e.astype(np.int8).reshape(-1) for e in expected])
    assert np.array_equal(got, want)


def _symbols(elf: Path) -> dict[str, tuple[int, str]]:
    """name -> (address, section) from the symbol table."""
    out = subprocess.run(["arm-none-eabi-objdump", "-t", str(elf)], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 5 and all(c in "0123456789abcdef" for c in parts[0]):
            table[parts[-1]] = (int(parts[0], 16), parts[-3] if parts[-3].startswith(".") else parts[-2])
    return table


def _check_placement(elf: Path, folder: Path) -> None:
    symbols = _symbols(elf)
    placed = [name for name in symbols if name.startswith("w0_") or name.startswith("w1_")]
    assert len(placed) == 4 + 6  # every buffer of both workloads
    for name in placed:
        address, section = symbols[name]
        assert DTCM[0] <= address < DTCM[1] and section == ".edgetune.dtcm", (name, hex(address), section)
    conv = get_kernel("conv2d_s8").function_name(get_kernel("conv2d_s8").parse_shape(WORKLOADS[1][1]))
    address, section = symbols[f"{conv}_col"]  # the im2col rows: in DTCM, as measured, not in plain .bss
    assert DTCM[0] <= address < DTCM[1] and section == ".edgetune.dtcm", (hex(address), section)


def _disassembly(obj: Path) -> str:
    out = subprocess.run(["arm-none-eabi-objdump", "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    return out.split("Disassembly of section", 1)[1]


def _check_objects_are_the_measured_ones(folder: Path, objects: dict[str, Path], tmp_path: Path) -> None:
    """Each kernel object equals the one compiled with the command the manifest records."""
    import json

    for entry in json.loads((folder / "manifest.json").read_text())["kernels"]:
        reference = tmp_path / (entry["function"] + ".ref.o")
        subprocess.run([entry["compiler_command"], *entry["cflags"], "-I", str(folder), "-c", str(folder / entry["source"]),
                        "-o", str(reference)], check=True)
        assert _disassembly(objects[entry["source"]]) == _disassembly(reference), entry["source"]


def test_cmake_firmware_builds_the_export_and_runs_in_qemu(export, tmp_path):
    folder, _ = export
    m55 = get_target("cortex-m55")
    project, expected = _user_project(tmp_path, m55)
    build = tmp_path / "build"
    configure = subprocess.run(["cmake", "-S", str(project), "-B", str(build), "-G", "Unix Makefiles",
                                f"-DCMAKE_TOOLCHAIN_FILE={project / 'toolchain.cmake'}", f"-DEDGETUNE_EXPORT={folder}"],
                               capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    assert "Warning" not in configure.stderr, configure.stderr  # both kernels were measured with GCC
    made = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    elf = build / "firmware.elf"
    _run_in_qemu(elf, expected)
    _check_placement(elf, folder)
    objects = {p.name[:-len(".obj")]: p for p in build.rglob("*.c.obj")}
    _check_objects_are_the_measured_ones(folder, objects, tmp_path)


def test_a_cmake_build_with_another_compiler_than_the_measured_one_is_warned_with_the_way_out(export, tmp_path):
    """The kernels were measured with GCC; a firmware configured with clang is told that their
    speed is not the measured one and how to tune for its own compiler (--compiler)."""
    folder, _ = export
    project, _ = _user_project(tmp_path, get_target("cortex-m55"))
    (project / "toolchain.cmake").write_text(
        "set(CMAKE_SYSTEM_NAME Generic)\nset(CMAKE_SYSTEM_PROCESSOR arm)\nset(CMAKE_C_COMPILER clang)\n"
        "set(CMAKE_C_COMPILER_TARGET arm-none-eabi)\nset(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)\n"
        'set(CMAKE_C_FLAGS_INIT "-march=armv8.1-m.main+mve.fp+fp.dp -mfloat-abi=hard -mthumb")\n')
    configure = subprocess.run(["cmake", "-S", str(project), "-B", str(tmp_path / "build"), "-G", "Unix Makefiles",
                                f"-DCMAKE_TOOLCHAIN_FILE={project / 'toolchain.cmake'}", f"-DEDGETUNE_EXPORT={folder}"],
                               capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    warned = " ".join(configure.stderr.split())  # CMake wraps its warnings
    assert "was measured with a GNU compiler" in warned and "with Clang" in warned, configure.stderr
    assert "with --compiler" in warned, configure.stderr


def test_make_firmware_builds_the_export_and_runs_in_qemu(export, tmp_path):
    folder, _ = export
    m55 = get_target("cortex-m55")
    project, expected = _user_project(tmp_path, m55)
    # No goal given: the included fragment's rules must not become the default goal.
    made = subprocess.run(["make", "-C", str(project), f"EXPORT={folder}"], capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    elf = project / "firmware.elf"
    _run_in_qemu(elf, expected)
    _check_placement(elf, folder)
    objects = {p.stem + ".c": p for p in (project / "edgetune-build").glob("*.o")}
    _check_objects_are_the_measured_ones(folder, objects, tmp_path)


def test_zephyr_module_files_follow_the_module_layout(export):
    """Zephyr is not installed here: the module is checked against the layout Zephyr's
    documentation describes (zephyr/module.yml naming the CMake folder and Kconfig file)."""
    import yaml

    folder, _ = export
    module = yaml.safe_load((folder / "zephyr" / "module.yml").read_text())
    assert module["build"]["cmake"] == "zephyr" and module["build"]["kconfig"] == "zephyr/Kconfig"
    assert (folder / module["build"]["cmake"] / "CMakeLists.txt").is_file()
    kconfig = (folder / module["build"]["kconfig"]).read_text()
    assert "config EDGETUNE_KERNELS" in kconfig
    cmake = (folder / "zephyr" / "CMakeLists.txt").read_text()
    for call in ("if(CONFIG_EDGETUNE_KERNELS)", "zephyr_library_named(edgetune_kernels)",
                 "zephyr_library_sources(${EDGETUNE_KERNELS_SOURCES})", "edgetune_kernels_source_flags(edgetune_kernels)",
                 "zephyr_linker_sources(SECTIONS"):
        assert call in cmake


@pytest.mark.parametrize("alias_given", [True, False])
def test_zephyr_module_cmake_builds_the_library_and_names_the_board_regions(export, tmp_path, alias_given):
    folder, _ = export
    project = tmp_path / "app"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(zephyr_project("EDGETUNE_KERNELS"))
    build = tmp_path / "build"
    extra = ["-DEDGETUNE_DTCM=DTCM"] if alias_given else []
    configure = subprocess.run(["cmake", "-S", str(project), "-B", str(build), "-G", "Unix Makefiles", f"-DMODULE={folder}",
                                f"-DCMAKE_TOOLCHAIN_FILE={FIRMWARE / 'toolchain.cmake'}", *extra],
                               capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    snippets = build / "linker_snippets.txt"
    if not alias_given:
        assert "set EDGETUNE_DTCM to the board's memory region" in configure.stderr
        assert not snippets.exists()
        return
    location, path = snippets.read_text().split()
    assert location == "SECTIONS"
    fragment = Path(path).read_text()
    assert "} > DTCM\n" in fragment and "} > EDGETUNE_DTCM" not in fragment
    made = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    objects = {p.name[:-len(".obj")]: p for p in build.rglob("*.c.obj")}
    _check_objects_are_the_measured_ones(folder, objects, tmp_path)
