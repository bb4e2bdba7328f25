"""The exported header states the calling convention: every function it declares has a
CMSIS-style doc comment (@brief, one @param[in]/@param[out] per argument in argument order,
@return for non-void functions), every buffer has an element-count macro, and the
conventions that differ between libraries (zero-point sign, shift range and sign, layouts,
packed arrays) are spelled out. Checked for every kernel, plain and packed, by parsing the
header of an export of stored trials."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from edgetune.codegen import KERNELS
from edgetune.export import export_best
from edgetune.session import workload_of
from edgetune.targets import get_target
from edgetune.tuner import Outcome, Trial, TuningDatabase

DECLARATION = re.compile(r"^(void|int) (\w+)\(([^)]*)\);$", re.M)
SHAPES = {"matmul_s8": "m=4,n=8,k=16", "matmul_f32": "m=4,n=8,k=16", "fir_q15": "taps=8,block=16",
          "fir_f32": "taps=8,block=16", "conv2d_s8": "h=6,w=6,cin=8,cout=8,kh=3,kw=3,stride=1,pad=1,dilation=1",
          "dwconv2d_s8": "h=6,w=6,c=16,kh=3,kw=3,stride=1,pad=1,dilation=1",
          "tconv2d_s8": "h=3,w=3,cin=8,cout=4,kh=3,kw=3,stride_h=2,stride_w=2,pad_top=0,pad_left=0,oh=6,ow=6",
          "bmm_s8": "batch=2,lhs_batches=2,rhs_batches=1,m=4,n=8,k=16,adj_x=0,adj_y=1"}


def _exported_header(target_name: str, tmp_path, packed: bool) -> str:
    target = get_target(target_name)
    db = TuningDatabase(tmp_path / f"{target_name}-{packed}.db")
    for name, kernel in KERNELS.items():
        shape = kernel.parse_shape(SHAPES[name])
        configs = list(kernel.tuning_space(target, shape))
        chosen = next((c for c in configs if c.as_dict().get("layout") == "packed"), configs[0]) if packed else configs[0]
        db.record(workload_of(kernel, target, shape), Trial(chosen, Outcome.OK, {target.measures: 100}), "random", 0)
    result = export_best(db, target, tmp_path / f"export-{target_name}-{packed}", objective=target.measures)
    assert len(result.entries) == len(KERNELS)
    return result.header.read_text()


def _doc_before(header: str, position: int) -> str:
    start = header.rfind("/**", 0, position)
    end = header.find("*/", start)
    assert start >= 0 and header[end + 2:position].strip() == "", "no doc comment right before the declaration"
    return header[start:end]


def _params(arguments: str) -> list[tuple[str, str]]:
    """(name, direction) of each C parameter: const pointers and scalars are inputs."""
    out = []
    for part in arguments.split(","):
        name = re.search(r"(\w+)\s*$", part).group(1)
        out.append((name, "out" if "*" in part and "const" not in part else "in"))
    return out


@pytest.mark.parametrize("target_name,packed", [("cortex-m55", False), ("cortex-m55", True), ("host", False)])
def test_every_function_documents_every_parameter(target_name, packed, tmp_path):
    header = _exported_header(target_name, tmp_path, packed)
    declarations = list(DECLARATION.finditer(header))
    assert len(declarations) >= 2 * len(KERNELS)  # a variant and a dispatcher per kernel
    for match in declarations:
        returns, function, arguments = match.groups()
        doc = _doc_before(header, match.start())
        assert "@brief" in doc, function
        documented = re.findall(r"@param\[(in|out)\]\s+(\w+)\s+\S", doc)
        assert [(name, direction) for direction, name in documented] == _params(arguments), function
        assert ("@return" in doc) == (returns == "int"), function
    if packed:
        assert any(m.group(2).endswith("_pack") for m in declarations)


def test_conventions_and_size_macros_are_spelled_out(tmp_path):
    header = _exported_header("cortex-m55", tmp_path, packed=False)
    matmul = KERNELS["matmul_s8"]
    shape = matmul.parse_shape(SHAPES["matmul_s8"])
    fn = matmul.function_name(shape).upper()
    io = matmul.make_io(shape, np.random.default_rng(0))
    for buf in io.buffers:  # output-size macros, as element counts
        assert f"#define EDGETUNE_{fn}_{buf.name.upper()}_ELEMENTS {buf.data.size} " in header
    doc = _doc_before(header, header.index(f"void {matmul.function_name(shape)}("))
    flat = " ".join(line.strip(" *") for line in doc.splitlines())
    assert "row-major [M=4][K=16]" in flat and "[K=16][N=8]" in flat  # layouts with sizes
    assert "the kernel subtracts it" in flat and "Not the negated offset CMSIS-NN" in flat  # zero-point sign
    assert "in [-31, 30]: negative shifts right" in flat  # shift range and sign


@pytest.mark.parametrize("target_name", ["cortex-m55", "host"])
def test_clang_checks_the_doc_comments_against_the_declarations(target_name, tmp_path):
    """Clang's -Wdocumentation warns on a @param naming no parameter and on malformed commands."""
    _exported_header(target_name, tmp_path, packed=True)
    folder = next(tmp_path.glob(f"export-{target_name}-*"))
    user = tmp_path / "user.c"
    user.write_text('#include "edgetune_kernels.h"\nint user(void) { return 0; }\n')
    subprocess.run(["clang", "-std=c99", "-Wall", "-Wextra", "-Wdocumentation", "-Werror", "-fsyntax-only",
                    "-I", str(folder), str(user)], check=True)
