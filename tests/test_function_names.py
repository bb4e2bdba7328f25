"""The C names of exported kernels fit every toolchain and file system whatever the shape:
a convolution's twelve shape keys once made a 129-character function name that the
manifest refused, so `edgetune export` failed on a database holding a realistic workload."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import edgetune
from edgetune.codegen.kernels import KERNELS, SHIPPED, unregister_kernel
from edgetune.codegen.kernels.base import MAX_SHAPE_VALUE
from edgetune.codegen.manifest import IDENTIFIER_RE, SOURCE_RE
from edgetune.targets.batch import member_function
from edgetune.tuner import Config

MISRA_SIGNIFICANT = 63  # MISRA C:2012 rule 5.1/5.2: identifiers distinct in their first 63 characters
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@pytest.fixture(autouse=True)
def _forget_user_kernels():
    yield
    for name in set(KERNELS) - SHIPPED:
        unregister_kernel(name)


def longest_shape(kernel) -> dict[str, int]:
    return {key: MAX_SHAPE_VALUE for key in kernel.shape_keys}


def check_names(kernel) -> None:
    shape = longest_shape(kernel)
    name = kernel.function_name(shape)
    assert C_IDENTIFIER.fullmatch(name) and IDENTIFIER_RE.fullmatch(name) and SOURCE_RE.fullmatch(f"{name}.c"), name
    # The variant's own identifiers: plain C's `<fn>_kernel`, a batch member's `<fn>_v<digest>`.
    member = member_function(kernel, shape, Config((("opt", "O2"),)))
    assert len(f"{name}_kernel") <= MISRA_SIGNIFICANT and len(member) <= MISRA_SIGNIFICANT, (name, member)
    # Shapes differing in any one key keep distinct names.
    names = {name} | {kernel.function_name({**shape, key: value - 1}) for key, value in shape.items()}
    assert len(names) == len(shape) + 1, names
    assert name.startswith(f"et_{kernel.name[:20]}")  # readable: it starts with the kernel's name


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_kernels_longest_shapes_give_names_that_fit(name):
    check_names(KERNELS[name])


def test_a_kernel_of_your_own_with_the_longest_name_and_many_keys_gives_names_that_fit():
    keys = tuple(f"key_{i}_of_the_shape" for i in range(8))
    spec = edgetune.KernelDef(name="k" * 40, shape=keys, args=[edgetune.Output("y", "int8", keys[0])],
                              reference=lambda shape, inputs: np.zeros(shape[keys[0]], np.int8),
                              source_text="void " + "k" * 40 + "(int8_t *y) { y[0] = 0; }\n")
    check_names(edgetune.api.register(spec))


def test_names_that_fit_are_unchanged():
    matmul = KERNELS["matmul_s8"]
    assert matmul.function_name(matmul.parse_shape("m=16,n=16,k=32")) == "et_matmul_s8_m16_n16_k32"


def test_a_realistic_convolution_exports_and_the_result_holds_the_values_measured_at_export(tmp_path):
    """The issue's workload: tuned on the host, exported; the returned entries carry the
    figure the manifest holds (they once said exported_value=None)."""
    db = tmp_path / "conv.db"
    shape = "h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride=1,pad=1"
    summary = edgetune.tune("conv2d_s8", shape, target="host", budget=1, db=db)
    assert summary.best is not None
    result = edgetune.export(tmp_path / "out", target="host", db=db)
    entry, = result.entries
    assert len(entry.function) <= 40 and (tmp_path / "out" / entry.source).is_file()
    stored, = json.loads(result.manifest.read_text())["kernels"]
    assert entry.exported_value is not None and entry.exported_value == stored["exported_value"]
