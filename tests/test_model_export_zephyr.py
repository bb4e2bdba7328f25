"""A model export folder as a Zephyr module (docs/model-export.md, "Zephyr"). Zephyr is not
installed here: the files are checked against the layout Zephyr's documentation describes
("Modules (External projects)"), and zephyr/CMakeLists.txt runs in plain CMake with stand-ins
for the Zephyr functions it calls, which record the library it makes: its sources must be
exactly the folder's C files, each with the flags the manifest says it was measured with, and
its linker snippet the fragment with the board's region names; the Kconfig files are read
with kconfiglib, the parser Zephyr's Kconfig tools are built on. DS-CNN is exported twice: for
the M55 (the arena in the DTCM) and for an M55 whose ITCM is too small for the module (the
code plan moves arrays to SRAM, stored in flash)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from dataclasses import replace

import kconfiglib
import pytest
import yaml

from edgetune.codegen.export import render_export
from edgetune.hal import load_target
from edgetune.model import load_model
from edgetune.model.export import choose_layers
from edgetune.model.module import render_model_module
from edgetune.publish import publish
from edgetune.targets import get_target
from zephyr_stand_ins import zephyr_project

ROOT = Path(__file__).resolve().parent
DS_CNN = ROOT / "data" / "models" / "ds_cnn_kws.tflite"
TOOLCHAIN = ROOT / "data" / "user_firmware_m55" / "toolchain.cmake"
SYMBOL = "EDGETUNE_MODEL_DS_CNN_KWS"


def _small_itcm_m55(folder: Path):
    text = (ROOT.parent / "targets" / "boards" / "cortex-m55.toml").read_text()
    text = text.replace('name = "cortex-m55"', 'name = "small-itcm-m55"', 1)
    text = text.replace('size = 0x0008_0000           # 512 KiB\naccess = "rwx"', 'size = 0x1_6000\naccess = "rwx"', 1)
    (folder / "board.toml").write_text(text)
    return load_target(folder / "board.toml")


# Optimisation levels unlike the model source's -O2, so that a source given another's flags shows.
OPT_LEVELS = ("O3", "Os")


def _export(target, folder: Path) -> None:
    """DS-CNN's module, its tuned layers on their default configurations but for two of them
    measured (as if) at another optimisation level, written as export_model writes it."""
    model = load_model(DS_CNN)
    chosen, _ = choose_layers(model, target, None)
    for key, opt in zip(list(chosen)[:len(OPT_LEVELS)], OPT_LEVELS):
        chosen[key] = replace(chosen[key], config=tuple((k, opt if k == "opt" else v) for k, v in chosen[key].config))
    data = DS_CNN.read_bytes()
    rendered = render_model_module(model, target, chosen, name="ds_cnn_kws", database="", date="today",
                                   version="test", model_bytes=data)
    publish(folder, rendered.files, rendered.manifest,
            lambda staging: (staging / "ds_cnn_kws.tflite").write_bytes(data))


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("zephyr")
    _export(get_target("cortex-m55"), root / "plain")
    _export(_small_itcm_m55(root), root / "split")
    assert '_PLACED(".edgetune.sram.rodata")' in (root / "split" / "ds_cnn_kws.c").read_text()
    return {"plain": root / "plain", "split": root / "split"}


@pytest.mark.parametrize("which", ["plain", "split"])
def test_model_module_files_follow_the_zephyr_module_layout(exports, which):
    folder = exports[which]
    module = yaml.safe_load((folder / "zephyr" / "module.yml").read_text())
    assert module == {"name": "edgetune_model_ds_cnn_kws", "build": {"cmake": "zephyr", "kconfig": "zephyr/Kconfig"}}
    cmake = (folder / module["build"]["cmake"] / "CMakeLists.txt").read_text()
    assert f"if(CONFIG_{SYMBOL})" in cmake and "zephyr_library_named(edgetune_model_ds_cnn_kws)" in cmake
    kconfig = (folder / module["build"]["kconfig"]).read_text()
    assert f"config {SYMBOL}\n\tbool " in kconfig
    # The code plan's option exists only where the plan moved something.
    assert (f"config {SYMBOL}_DEFAULT_SECTIONS\n" in kconfig) == (which == "split")
    listed = dict(json.loads((folder / "manifest.json").read_text())["files"])
    assert {"zephyr/module.yml", "zephyr/CMakeLists.txt", "zephyr/Kconfig"} <= set(listed)


def _kconfig(path: Path) -> dict[str, object]:
    """The symbols a Kconfig file defines, read by kconfiglib (what Zephyr's Kconfig tools use)."""
    read = kconfiglib.Kconfig(str(path), warn=True, warn_to_stderr=False)
    assert not read.warnings, read.warnings
    return {name: sym for name, sym in read.syms.items() if sym.nodes}


@pytest.mark.parametrize("which", ["plain", "split"])
def test_kconfig_options_parse_and_the_sections_option_depends_on_the_module(exports, which):
    symbols = _kconfig(exports[which] / "zephyr" / "Kconfig")
    wanted = {SYMBOL, f"{SYMBOL}_DEFAULT_SECTIONS"} if which == "split" else {SYMBOL}
    assert set(symbols) == wanted
    assert all(s.orig_type == kconfiglib.BOOL and s.str_value == "y" for s in symbols.values())
    if which == "split":
        sections = symbols[f"{SYMBOL}_DEFAULT_SECTIONS"]
        assert kconfiglib.expr_str(sections.direct_dep) == SYMBOL
        symbols[SYMBOL].set_value("n")
        assert sections.str_value == "n"


def test_the_kernel_exports_kconfig_parses_too(tmp_path):
    target = get_target("cortex-m55")
    chosen, _ = choose_layers(load_model(DS_CNN), target, None)
    files = render_export(target, list(chosen.values()), database="t.db", date="today", version="test").files
    (tmp_path / "Kconfig").write_text(files["zephyr/Kconfig"])
    symbols = _kconfig(tmp_path / "Kconfig")
    assert set(symbols) == {"EDGETUNE_KERNELS"} and symbols["EDGETUNE_KERNELS"].str_value == "y"


# After the module: what the library holds, written to library.json.
LIBRARY_REPORT = """
get_property(library GLOBAL PROPERTY stand_in_library)
get_target_property(sources ${library} SOURCES)
get_target_property(definitions ${library} COMPILE_DEFINITIONS)
set(json "{\\"library\\": \\"${library}\\", \\"definitions\\": \\"${definitions}\\", \\"sources\\": {")
set(separator "")
foreach(source ${sources})
  get_source_file_property(options ${source} TARGET_DIRECTORY ${library} COMPILE_OPTIONS)
  get_filename_component(name ${source} NAME)
  string(APPEND json "${separator}\\"${name}\\": \\"${options}\\"")
  set(separator ", ")
endforeach()
file(WRITE "${CMAKE_BINARY_DIR}/library.json" "${json}}}")
"""


def _configure(folder: Path, tmp_path: Path, *settings: str) -> tuple[subprocess.CompletedProcess, Path]:
    project, build = tmp_path / "app", tmp_path / "build"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(zephyr_project(SYMBOL, LIBRARY_REPORT))
    done = subprocess.run(["cmake", "-S", str(project), "-B", str(build), "-G", "Unix Makefiles", f"-DMODULE={folder}",
                           f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", *settings], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done, build


def _placed_sections(build: Path, folder: Path) -> set[str]:
    """The code plan's sections in the library's objects, built with arm-none-eabi-gcc."""
    made = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    objects = [str(p) for p in build.rglob("*.c.obj")]
    assert len(objects) == len(list(folder.glob("*.c")))
    heads = subprocess.run(["arm-none-eabi-objdump", "-h", *objects], capture_output=True, text=True, check=True).stdout
    return {word for line in heads.splitlines() for word in line.split() if word.startswith(".edgetune.sram")}


def _measured_flags(folder: Path) -> dict[str, list[str]]:
    """Each C file of the folder and the flags the manifest says it was measured with, less the
    target compiler's own (Zephyr's board sets -mcpu): a kernel variant's own, every other
    file the model source's."""
    manifest = json.loads((folder / "manifest.json").read_text())
    target = get_target("cortex-m55").compilers[0].cflags
    plain = manifest["dispatch"]["cflags"]
    assert tuple(plain[:len(target)]) == target
    flags = {p.name: plain[len(target):] for p in folder.glob("*.c")}
    for kernel in manifest["kernels"]:
        compiler = get_target("cortex-m55").compiler(kernel["compiler"]).cflags
        assert tuple(kernel["cflags"][:len(compiler)]) == compiler
        flags[kernel["source"]] = kernel["cflags"][len(compiler):]
    return flags


@pytest.mark.qemu  # arm-none-eabi-gcc (CMake's toolchain file)
@pytest.mark.parametrize("which", ["plain", "split"])
def test_zephyr_library_holds_exactly_the_modules_c_files_with_their_measured_flags(exports, tmp_path, which):
    folder = exports[which]
    _, build = _configure(folder, tmp_path, "-DEDGETUNE_DTCM=DTCM", f"-DCONFIG_{SYMBOL}_DEFAULT_SECTIONS=y")
    library = json.loads((build / "library.json").read_text())
    assert library["library"] == "edgetune_model_ds_cnn_kws"
    got = {name: options.split(";") for name, options in library["sources"].items()}
    want = _measured_flags(folder)
    assert {f"-{opt}" for opt in OPT_LEVELS} <= {flag for flags in want.values() for flag in flags}
    assert got == want
    # The code plan's sections are kept out with the option on (the default); nothing to keep out otherwise.
    assert ("EDGETUNE_DEFAULT_SECTIONS" in library["definitions"]) == (which == "split")
    location, path = (build / "linker_snippets.txt").read_text().split()
    fragment = Path(path).read_text()
    assert location == "SECTIONS" and "} > DTCM\n" in fragment and "} > EDGETUNE_" not in fragment
    assert ".edgetune.sram" not in fragment.split("*/")[-1]  # the code's output sections were cut
    if which == "split":  # and the objects carry none of them
        assert not _placed_sections(build, folder)


@pytest.mark.qemu  # arm-none-eabi-gcc (CMake's toolchain file)
def test_without_default_sections_the_code_plans_sections_go_to_the_named_board_regions(exports, tmp_path):
    folder = exports["split"]
    _, build = _configure(folder, tmp_path, "-DEDGETUNE_DTCM=DTCM", "-DEDGETUNE_SRAM=SRAM", "-DEDGETUNE_LOAD=FLASH")
    library = json.loads((build / "library.json").read_text())
    assert "EDGETUNE_DEFAULT_SECTIONS" not in library["definitions"]
    _, path = (build / "linker_snippets.txt").read_text().split()
    fragment = Path(path).read_text()
    assert "} > DTCM\n" in fragment and "} > SRAM AT > FLASH\n" in fragment and "} > EDGETUNE_" not in fragment
    assert {".edgetune.sram.rodata"} <= _placed_sections(build, folder)


@pytest.mark.qemu  # arm-none-eabi-gcc (CMake's toolchain file)
def test_without_default_sections_an_unnamed_code_region_is_said_and_nothing_is_linked(exports, tmp_path):
    done, build = _configure(exports["split"], tmp_path, "-DEDGETUNE_DTCM=DTCM")
    assert "set EDGETUNE_SRAM to the board's memory region" in done.stderr
    assert "EDGETUNE_LOAD" in done.stderr
    assert not (build / "linker_snippets.txt").exists()
