"""Shape values too large for a kernel, a tensor or a target are refused up front naming
the key and value (exit 2, nothing created), and every error line stays one line whatever
the path or value it quotes holds."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.cli.errors import error_line
from edgetune.codegen import KERNELS, KernelError
from edgetune.codegen.kernels.base import MAX_SHAPE_VALUE
from edgetune.npu import NPU_OPERATORS, NpuOperatorError

HUGE = 2 ** 70


def cli(*args):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def one_error_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgetune: error: "), out
    return lines[0]


def _with(example: str, key: str, value: int) -> str:
    items = dict(part.split("=") for part in example.split(","))
    return ",".join(f"{k}={value if k == key else v}" for k, v in items.items())


def _full_text(kernel) -> str:
    """The kernel's example with every shape key spelled out (no shorthands)."""
    return ",".join(f"{k}={v}" for k, v in kernel.parse_shape(kernel.example_shape()).items())


@pytest.mark.parametrize("name, key", [(kernel.name, key) for kernel in KERNELS.values() for key in kernel.shape_keys])
def test_every_shape_key_of_every_kernel_refuses_a_huge_value_by_name(name, key):
    kernel = KERNELS[name]
    with pytest.raises(KernelError, match=f"shape: {key}={HUGE} is too large"):
        kernel.parse_shape(_with(_full_text(kernel), key, HUGE))
    with pytest.raises(KernelError, match=f"{key}={MAX_SHAPE_VALUE + 1} is too large"):
        kernel.parse_shape({**kernel.parse_shape(kernel.example_shape()), key: MAX_SHAPE_VALUE + 1})


@pytest.mark.parametrize("name", ["conv2d_s8", "dwconv2d_s8"])
@pytest.mark.parametrize("shorthand", ["stride", "dilation", "pad"])
def test_a_huge_convolution_shorthand_is_refused_by_its_own_name(name, shorthand):
    kernel = KERNELS[name]
    with pytest.raises(KernelError, match=f"shape: {shorthand}={HUGE} is too large"):
        kernel.parse_shape(_with(kernel.example_shape(), shorthand, HUGE))


@pytest.mark.parametrize("name, key", [(op.name, key) for op in NPU_OPERATORS.values() for key in op.shape_keys])
def test_every_npu_operator_key_refuses_a_huge_value_by_name(name, key):
    operator = NPU_OPERATORS[name]
    with pytest.raises(NpuOperatorError, match=f"shape: {key}={HUGE} is too large"):
        operator.parse_shape(_with(operator.example, key, HUGE))


def test_npu_tensors_are_limited_too():
    with pytest.raises(NpuOperatorError, match="the input tensor has 4503599627370496 elements"):
        NPU_OPERATORS["conv2d_s8"].parse_shape("h=16777216,w=16777216,cin=16,cout=32,kh=3,kw=3,stride=1,pad=1,dilation=1")
    NPU_OPERATORS["conv2d_s8"].parse_shape(NPU_OPERATORS["conv2d_s8"].example)  # a sensible one passes


@pytest.mark.parametrize("shape, target, culprit", [
    (f"m={HUGE},n=4,k=4", "host", f"m={HUGE} is too large"),  # numpy's "Maximum allowed dimension exceeded" before
    ("m=100000,n=100000,k=4", "host", "the output tensor has 10000000000 elements"),  # a 74 GiB allocation before
    ("m=4000,n=4000,k=4", "cortex-m55", "no memory of cortex-m55 holds them"),  # 0 trials, "exhausted" before
    ("m=4096,n=4096,k=1", "cortex-m4", "no memory of cortex-m4 holds them"),
])
def test_tune_refuses_a_workload_too_large_in_one_line(tmp_path, shape, target, culprit):
    for command in (["tune", "matmul_s8"], ["record", "matmul_s8", "--out", str(tmp_path / "space.json")]):
        code, out = cli(*command, "--target", target, "--shape", shape, "--db", str(tmp_path / "t.db"))
        assert code == 2 and culprit in one_error_line(out), out
    assert not (tmp_path / "t.db").exists()  # refused before anything was created


def test_matmul_f32_limits_its_tensors_too():
    with pytest.raises(KernelError, match="the a tensor has"):
        KERNELS["matmul_f32"].parse_shape("m=65536,n=1,k=65536")


def test_a_workload_that_fits_is_accepted(m4):
    kernel = KERNELS["matmul_s8"]
    kernel.check_fits(m4, kernel.parse_shape("m=16,n=16,k=32"))  # raises nothing


@pytest.mark.parametrize("args", [
    ["best", "matmul_s8", "--shape", "m=2,n=2,k=2", "--db", "{tmp}/a\nb.db"],
    ["tune", "matmul_s8", "--shape", "m=2,n=2,k=2", "--target", "{tmp}/a\nb.toml", "--db", "{tmp}/t.db"],
    ["report", "--db", "{tmp}/a\nb.db", "--out", "{tmp}/r"],
    ["db", "import", "{tmp}/trials\r\n.jsonl", "--db", "{tmp}/t.db"],
])
def test_a_path_with_a_line_break_stays_on_one_error_line(tmp_path, args):
    code, out = cli(*(arg.replace("{tmp}", str(tmp_path)) for arg in args))
    line = one_error_line(out)
    assert code == 2 and ("a\\nb" in line or "trials\\r\\n.jsonl" in line), out


def test_error_lines_escape_control_characters():
    assert error_line("bad \x1b[31mred\x1b[0m\tname") == "edgetune: error: bad \\x1b[31mred\\x1b[0m\\tname"
    assert error_line("kept: é, µ and spaces") == "edgetune: error: kept: é, µ and spaces"


@pytest.mark.parametrize("kernel, shape, culprit", [
    ("dwconv2d_s8", "h=8,w=8,c=3,kh=3,kw=3,pad=full", "pad='full' must be a non-negative integer, same or valid"),
    ("conv2d_s8", "h=8,w=8,cin=3,cout=3,kh=3,kw=3,stride=two", "stride='two' must be a positive integer"),
    ("matmul_s8", "m=abc,n=1,k=1", "m='abc' must be a positive integer"),
])
def test_a_word_a_key_does_not_take_is_refused_naming_what_it_takes(kernel, shape, culprit):
    with pytest.raises(KernelError) as raised:
        KERNELS[kernel].parse_shape(shape)
    assert str(raised.value) == f"shape: {culprit}"
