"""`model tune`'s progress lines (issue 31 item 12): the layer by a short name, not its
~200-character workload id; the warm-up said calmly, not as a fault."""
from __future__ import annotations

from edgetune.codegen import get_kernel
from edgetune.model.session import ModelRound, progress_line
from edgetune.session import workload_of
from edgetune.targets import get_target

SHAPE = "h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride=1,pad=1"


def _round(total, missing, layers):
    kernel = get_kernel("conv2d_s8")
    workload = workload_of(kernel, get_target("cortex-m55"), kernel.parse_shape(SHAPE))
    return ModelRound(3, workload, 4, 12, 40, total, missing, layers)


def test_a_progress_line_names_the_layers_shortly():
    line = progress_line(_round(12345.0, 0, (1, 3, 5)), "instructions")
    assert line == "[  12/40] round 3: layers 1,3,5 conv2d_s8 3x3 (4 trials) | tuned layers alone: instructions=12345"


def test_the_warm_up_is_said_calmly_and_many_layers_are_cut_short():
    line = progress_line(_round(None, 2, (0, 2, 4, 6, 8, 10)), "cycles")
    assert "without a feasible trial" not in line and "model total once every layer is measured (2 to go)" in line
    assert "layers 0,2,4,6,... conv2d_s8 3x3" in line and len(line) <= 120  # a terminal's width, not ~200 characters of workload id


def test_the_summary_names_a_workload_by_a_compact_shape_that_keeps_what_differs():
    """The final table's workload column (a new user saw 250-character lines): neutral values
    left out, equal per-axis pairs and paddings folded, anything else kept as it is."""
    from edgetune.model.session import compact_shape

    kernel = get_kernel("conv2d_s8")
    full = kernel.parse_shape(SHAPE)
    assert len(",".join(f"{k}={v}" for k, v in full.items())) > 120
    assert compact_shape(full) == "h=16,w=16,cin=32,cout=32,kh=3,kw=3,pad=1"
    uneven = dict(full, stride_h=2, pad_bottom=2, dilation_w=2)
    assert compact_shape(uneven) == ("h=16,w=16,cin=32,cout=32,kh=3,kw=3,stride_h=2,dilation_w=2,"
                                     "pad_top=1,pad_bottom=2,pad_left=1,pad_right=1")
    assert compact_shape({"m": 1, "n": 8, "k": 128}) == "m=1,n=8,k=128"
