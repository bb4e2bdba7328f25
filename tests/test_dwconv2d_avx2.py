"""dwconv2d_s8's AVX2 path on the host: offered only where the HAL detects AVX2, register
limits as constraints, bit-exact with numpy on drawn shapes and configurations (edge shapes
and extreme quantisation included), warning-free with every host compiler."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from edgetune.evaluate import Evaluator
from edgetune.tuner import Outcome
from kernel_runs import assert_ok, geometry_shapes, run_config
from kernel_checks import compile_only

shapes = geometry_shapes({"c": st.integers(1, 40), "mult": st.sampled_from([1, 1, 2, 3])})


def has_avx2(dw, host) -> bool:
    """Whether this machine has AVX2; if not, the space must not offer the path."""
    if host.has_vector("avx2"):
        return True
    assert "avx2" not in dw.space(host, dw.parse_shape(dw.example_shape())).param("vector").values
    return False


def test_avx2_is_offered_only_with_the_unit_and_within_its_registers(dw, host, m55):
    shape = dw.parse_shape("h=8,w=8,c=3,kh=3,kw=3,stride=1,pad=1,dilation=1")
    assert "avx2" not in dw.space(m55, shape).param("vector").values
    if not has_avx2(dw, host):
        return
    registers = host.vector_unit("avx2").registers
    avx2 = [c for c in dw.space(host, shape) if c["vector"] == "avx2"]
    # Three channels still get one whole vector of eight; narrower tiles are never offered.
    assert avx2 and {c["tile_c"] for c in avx2} == {8}
    wide = [c for c in dw.space(host, dw.parse_shape("h=8,w=8,c=64,kh=3,kw=3,stride=1,pad=1,dilation=1"))
            if c["vector"] == "avx2"]
    assert {c["tile_c"] for c in wide} == {8, 16}
    assert all((c["tile_p"] + 1) * c["tile_c"] // 8 + 2 <= registers for c in wide)


def test_drawn_avx2_variants_are_bit_exact(dw, host, tmp_path_factory):
    if not has_avx2(dw, host):
        return
    work = tmp_path_factory.mktemp("dw-avx2")

    @settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])  # each example builds and runs: no shrinking
    @given(shape=shapes, seed=st.integers(0, 2**16), data=st.data(), edge=st.sampled_from(["random", "extreme"]))
    def run(shape, seed, data, edge):
        shape = dw.parse_shape(shape)
        space = dw.space(host, shape)
        indices = [int(i) for i in space.legal_indices() if space.config_at(int(i))["vector"] == "avx2"]
        config = space.config_at(data.draw(st.sampled_from(indices), "config index"))
        io = dw.make_io(shape, np.random.default_rng(seed), edge=edge)
        trial = Evaluator(dw, host, shape, space, io, work)(config)
        assert trial.outcome is Outcome.OK, f"{shape} {config.key()}: {trial.outcome.value}: {trial.error}"

    run()


@pytest.mark.parametrize("shape_text", [
    "h=1,w=1,c=1,kh=1,kw=1,stride=1,pad=0,dilation=1",
    "h=9,w=7,c=13,kh=3,kw=3,stride=2,pad=2,dilation=1",   # 3x3, odd channels, stride 2, pad > 1
    "h=8,w=9,c=21,kh=3,kw=3,stride=1,pad=1,dilation=2",   # 3x3 dilated: interior and border tiles
])
@pytest.mark.one_case(2)
def test_edge_shapes_with_the_largest_tiles(dw, host, tmp_path, shape_text):
    if not has_avx2(dw, host):
        return
    shape = dw.parse_shape(shape_text)
    space = dw.space(host, shape)
    configs = [c for c in space if c["vector"] == "avx2"]
    largest = max(configs, key=lambda c: (c["tile_p"] * c["tile_c"], c["taps"] == "unrolled3x3"))
    for index, compiler in enumerate(c.name for c in host.compilers):
        values = {**largest.as_dict(), "compiler": compiler}
        assert_ok(run_config(dw, host, shape, values, tmp_path, edge=("extreme" if index % 2 else "random"), seed=index))


def test_avx2_compiles_warning_free_with_every_host_compiler(dw, host, tmp_path):
    if not has_avx2(dw, host):
        return
    shape = dw.parse_shape("h=6,w=5,c=19,kh=3,kw=3,stride=1,pad=1,dilation=1")
    space = dw.space(host, shape)
    for compiler in host.compilers:
        for taps, opt in (("loop", "Os"), ("unrolled3x3", "O3")):
            config = max((c for c in space if c["vector"] == "avx2" and c["taps"] == taps and c["opt"] == opt
                          and c["compiler"] == compiler.name), key=lambda c: c["tile_p"] * c["tile_c"])
            result = compile_only(host, dw.render(host, shape, config), tmp_path)
            assert result.returncode == 0, f"{config.key()}:\n{result.stderr}"
