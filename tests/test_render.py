"""Rendering: deterministic, readable C that compiles warning-free (-Wall -Wextra -Werror)
with every compiler a target offers; provenance text cannot break out of its comment."""
from __future__ import annotations

import numpy as np
import pytest

from kernel_checks import compile_only


def test_rendering_is_deterministic(matmul, m55):
    shape = matmul.parse_shape("m=5,n=13,k=7")
    space = matmul.space(m55, shape)
    config = space.config_at(int(space.legal_indices()[17]))
    assert matmul.render(m55, shape, config).source == matmul.render(m55, shape, config).source


def test_source_names_its_configuration(matmul, m55):
    shape = matmul.parse_shape("m=4,n=8,k=4")
    config = matmul.space(m55, shape).make({"tile_m": 2, "tile_n": 8, "unroll_k": 2, "vector": "mve",
                                            "layout": "rowmajor", "compiler": "clang", "opt": "O3"})
    source = matmul.render(m55, shape, config).source
    assert "tile_m=2, tile_n=8, unroll_k=2, vector=mve, layout=rowmajor, compiler=clang, opt=O3" in source
    assert "#include <arm_mve.h>" in source and "void et_matmul_s8_m4_n8_k4(" in source


def test_provenance_cannot_close_the_comment(matmul, m55, tmp_path):
    shape = matmul.parse_shape("m=2,n=4,k=2")
    config = next(iter(matmul.space(m55, shape)))
    rendered = matmul.render(m55, shape, config, provenance=("evil */ int injected; /*", "two\nlines"))
    assert "int injected;" not in rendered.source.split("*/", 1)[1]
    assert compile_only(m55, rendered, tmp_path).returncode == 0


@pytest.mark.qemu
@pytest.mark.parametrize("shape_text", ["m=7,n=19,k=5",  # every tail; the others (4 s each): slow tier
                                        *(pytest.param(s, marks=pytest.mark.slow) for s in ("m=1,n=1,k=1", "m=16,n=32,k=16"))])
def test_sampled_variants_compile_warning_free_on_every_compiler(matmul, m55, host, tmp_path, shape_text):
    shape = matmul.parse_shape(shape_text)
    for target in (m55, host):
        space = matmul.space(target, shape)
        picks = np.random.default_rng(0).choice(space.legal_indices(), size=min(8, len(space)), replace=False)
        for compiler in target.compilers:
            for index in picks:
                config = space.make({**space.config_at(int(index)).as_dict(), "compiler": compiler.name})
                result = compile_only(target, matmul.render(target, shape, config), tmp_path)
                assert result.returncode == 0, f"{target.name} {config.key()}:\n{result.stderr}"


@pytest.mark.parametrize("escape", ["{{ self.__init__.__globals__ }}", "{{ ''.__class__.__mro__[1].__subclasses__() }}",
                                    "{{ cycler.__init__.__globals__.os.system('true') }}"])
def test_templates_render_in_the_sandbox(tmp_path, escape):
    """A template reaches the values it is given, never Python's internals (issue 27)."""
    from edgetune.codegen import CodegenError, render

    (tmp_path / "evil.c.j2").write_text(f"int x; /* {escape} */\n")
    with pytest.raises(CodegenError, match="refused by the template sandbox"):
        render("evil.c.j2", {}, tmp_path)
    (tmp_path / "plain.c.j2").write_text("int {{ name }}[{{ shape.n }}];\n")
    assert render("plain.c.j2", {"name": "x", "shape": {"n": 4}}, tmp_path) == "int x[4];\n"
