"""CMSIS-DSP's arm_fir_q15, built from the `cmsisdsp` sdist on PyPI at bench time, as a source
measured (edgetune.evaluate.measure_source) in the same firmware harness as edgetune's variants.

The sdist carries CMSIS-DSP's C sources (Source/, Include/, PrivateInclude/). It is
downloaded with pip into edgetune's cache folder (never into the repository) and only the
headers and the two FIR sources are unpacked from it. It has no CMSIS-Core, so the build
defines `__GNUC_PYTHON__`, CMSIS-DSP's own switch for building without CMSIS-Core (it only
turns off ARM_MATH_DSP, the DSP-extension intrinsics, which the Helium FIR does not use), and
ARM_MATH_MVEI / ARM_MATH_HELIUM, which select the Helium code paths (CMSIS-DSP docs).

Library rules (arm_fir_init_q15.c and arm_fir_q15.c of the sdist): numTaps even and >= 4
(checked only when ARM_MATH_DSP is defined); for Helium the coefficient array must be
padded with zeros to a multiple of 8 (the wrapper pads it); any block size (4 outputs per
step and a tail of block % 4); 1..32 taps have dedicated unrolled kernels.

The measured wrapper does what a stream does once (copy the coefficients into the padded
array, arm_fir_init_q15, put the taps-1 history samples of x into the state) in a noinline
setup function, then calls arm_fir_q15 on the block's new samples through a volatile
pointer, so the compiler can neither inline nor specialise the library on the bench's
constants. The setup alone is measured as a second kernel (its output: y untouched) and
subtracted: what remains is the cost of one arm_fir_q15 call in a running stream.
"""
from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

from edgetune.codegen.kernels.base import RenderedKernel
from edgetune.evaluate import measure_source
from edgetune.session import workload_inputs, workload_of
from edgetune.targets.toolchain import cache_dir

VERSION = "1.10.3"
ROOT = f"cmsisdsp-{VERSION}"
FIR_SOURCES = ("Source/FilteringFunctions/arm_fir_init_q15.c", "Source/FilteringFunctions/arm_fir_q15.c")
HEADER_FOLDERS = ("Include/", "PrivateInclude/")
DEFINES = ("-D__GNUC_PYTHON__", "-DARM_MATH_MVEI", "-DARM_MATH_HELIUM")

WRAPPER = """
#include "kernel.h"

enum {{ LIB_TAPS = {taps}, LIB_BLOCK = {block}, LIB_PADDED = (LIB_TAPS + 7) / 8 * 8 }};

/* Helium reads whole vectors: room for one more past the state's taps+block-1 samples. */
static q15_t lib_state[LIB_TAPS + LIB_BLOCK - 1 + 8];
static q15_t lib_coeffs[LIB_PADDED];  /* zero past LIB_TAPS, as the Helium version requires */
static arm_fir_instance_q15 lib_fir;
void (*volatile lib_filter)(const arm_fir_instance_q15 *, const q15_t *, q15_t *, uint32_t) = arm_fir_q15;

/* Once per stream: coefficients (already time-reversed, as arm_fir_q15 wants them), the
   instance, and the taps-1 history samples a previous call would have left in the state. */
__attribute__((noinline)) static int lib_setup(const int16_t *x, const int16_t *coeffs)
{{
    for (int k = 0; k < LIB_TAPS; k++) lib_coeffs[k] = coeffs[k];
    if (arm_fir_init_q15(&lib_fir, LIB_TAPS, lib_coeffs, lib_state, LIB_BLOCK) != ARM_MATH_SUCCESS) return 1;
    for (int k = 0; k < LIB_TAPS - 1; k++) lib_state[k] = x[k];
    return 0;
}}

void {fn}(const int16_t *x, const int16_t *coeffs, int16_t *y)
{{
    if (lib_setup(x, coeffs) != 0) return;
{call}}}
"""
CALL = "    lib_filter(&lib_fir, x + LIB_TAPS - 1, y, LIB_BLOCK);\n"
NO_CALL = "    (void)y;\n"


class SourcesUnavailable(Exception):
    """The sdist could not be downloaded or unpacked (offline, say)."""


def library_root(cache: Path | None = None) -> Path:
    """The unpacked sources, downloaded with pip on first use."""
    folder = (cache or cache_dir()) / "cmsisdsp" / VERSION
    done = folder / ".unpacked"
    if done.exists():
        return folder / ROOT
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{ROOT}.tar.gz"
    if not archive.exists():
        # Only cmsisdsp itself as source (its build requirements may come as wheels: pip
        # prepares the sdist's metadata before saving it).
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "cmsisdsp",
                   f"cmsisdsp=={VERSION}", "-d", str(folder)]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise SourcesUnavailable(f"pip download cmsisdsp=={VERSION} timed out") from None
        if result.returncode != 0 or not archive.exists():
            last = (result.stderr.strip().splitlines() or ["no archive saved"])[-1]
            raise SourcesUnavailable(f"pip download cmsisdsp=={VERSION} failed: {last}")
    unpack(archive, folder)
    done.write_text(VERSION + "\n")
    return folder / ROOT


def wanted(name: str) -> bool:
    """Only the headers and the two FIR sources, and only plain relative names."""
    parts = name.split("/")
    if parts[0] != ROOT or ".." in parts or name.startswith("/"):
        return False
    inner = "/".join(parts[1:])
    return inner in FIR_SOURCES or inner == "LICENSE" or (inner.startswith(HEADER_FOLDERS) and inner.endswith(".h"))


def unpack(archive: Path, folder: Path) -> None:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                if not member.isfile() or not wanted(member.name):
                    continue
                target = folder / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    except (OSError, tarfile.TarError) as exc:
        raise SourcesUnavailable(f"{archive.name}: cannot unpack: {exc}") from None
    missing = [name for name in FIR_SOURCES if not (folder / ROOT / name).is_file()]
    if missing:
        raise SourcesUnavailable(f"{archive.name}: lacks {', '.join(missing)}")


def wrapper_source(root: Path, fn: str, taps: int, block: int, call: bool = True) -> str:
    """The library's two FIR sources in one translation unit with the wrapper after them."""
    parts = [f"/* CMSIS-DSP {VERSION} (PyPI sdist cmsisdsp), {name} */\n" + (root / name).read_text(encoding="utf-8-sig")
             for name in FIR_SOURCES]
    return "\n".join(parts) + WRAPPER.format(fn=fn, taps=taps, block=block, call=CALL if call else NO_CALL)


def library_cflags(root: Path) -> tuple[str, ...]:
    # -Wno-error: the harness builds with -Werror; a warning in Arm's code must not stop the bench.
    return ("-O3", "-Wno-error", *DEFINES, f"-I{root / 'Include'}", f"-I{root / 'PrivateInclude'}")


def library_source(kernel, shape, root: Path, compiler: str, setup_only: bool = False) -> RenderedKernel:
    """arm_fir_q15 (or, setup_only, just its setup) under fir_q15's declaration, built with
    `compiler` and the library's flags."""
    fn = kernel.function_name(shape)
    source = wrapper_source(root, fn, shape["taps"], shape["block"], call=not setup_only)
    return RenderedKernel(source=source, function=fn, declaration=kernel.declaration(shape, fn=fn),
                          compiler=compiler, cflags=library_cflags(root))


def measure_library(kernel, target, shape, inputs, root: Path, compiler: str, setup_only: bool, work: Path):
    """The library's source measured on `inputs` as a variant is (edgetune.evaluate.measure_source).
    The shape must be fir_q15's with rounding=truncate: the reference its output is checked
    against, bit for bit; with no filter call (setup_only), y stays as the harness loaded it."""
    unchanged = [np.array(b.data, copy=True) for b in inputs.outputs()] if setup_only else None
    return measure_source(kernel, target, shape, library_source(kernel, shape, root, compiler, setup_only), inputs,
                          work, expected=unchanged)


def library_fir(kernel, target, shape_text, work):
    """arm_fir_q15 per compiler: (instructions of one call, of the setup), or the reason it
    was not measured. Its output is checked against rounding=truncate bit for bit."""
    try:
        root = library_root()
    except SourcesUnavailable as exc:
        return f"CMSIS-DSP sources unavailable ({exc}): arm_fir_q15 not measured, edgetune's figures alone"
    shape = kernel.parse_shape(f"{shape_text},rounding=truncate")
    inputs = workload_inputs(kernel, workload_of(kernel, target, shape))
    counts = {}
    for compiler in ("gcc", "clang"):
        full, setup = (measure_library(kernel, target, shape, inputs, root, compiler, setup_only, work)
                       for setup_only in (False, True))
        for result in (full, setup):
            if result.outcome.failed:
                raise SystemExit(f"arm_fir_q15 with {compiler}: {result.outcome.value}: {result.error}")
        counts[compiler] = (full.values["instructions"] - setup.values["instructions"], setup.values["instructions"])
    return counts
