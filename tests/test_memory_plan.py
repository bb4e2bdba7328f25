"""The memory plan (app/model/memory_plan.py): tensors alive together never share bytes, in
place only where the operator allows it and its input dies there, every offset 16-byte
aligned, the peak no more than the tensors' sum; on the four MLPerf Tiny models too, where
the peak is compared with TFLite Micro's own arena."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.model.memory_plan import ALIGN, TensorLife, aligned, check_plan, plan_memory, scratch_id
from edgetune.model import load_model
from edgetune.model.module import memory_plan, schedule
from edgetune.model.operators import operator_params
from edgetune.model.export import tflm_arena_bytes

MODELS = Path(__file__).parent / "data" / "models"
MODEL_FILES = sorted(p.name for p in MODELS.glob("*.tflite"))


def _random_lives(rng: np.random.Generator, n: int) -> list[TensorLife]:
    lives = []
    for t in range(n):
        first = int(rng.integers(0, 20))
        lives.append(TensorLife(t, int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 6))))
    return lives


def _overlapping(plan, lives):
    """Pairs of tensors alive at one step whose bytes overlap."""
    by = plan.by_tensor()
    bad = []
    for a in lives:
        for b in lives:
            if a.tensor < b.tensor and a.overlaps(b):
                x, y = by[a.tensor], by[b.tensor]
                if x.offset < y.end and y.offset < x.end:
                    bad.append((a.tensor, b.tensor))
    return bad


@pytest.mark.parametrize("seed", range(20))
def test_live_tensors_never_share_bytes_and_offsets_are_aligned(seed):
    lives = _random_lives(np.random.default_rng(seed), 30)
    plan = plan_memory(lives)
    assert _overlapping(plan, lives) == []
    assert check_plan(plan, lives) == []
    assert all(a.offset % ALIGN == 0 for a in plan.allocations)
    assert plan.arena_bytes % ALIGN == 0
    assert max(a.end for a in plan.allocations) <= plan.arena_bytes <= plan.total_bytes
    assert plan.total_bytes == sum(aligned(l.nbytes) for l in lives)


def test_tensors_that_never_live_together_share_one_offset():
    lives = [TensorLife(0, 100, 0, 1), TensorLife(1, 100, 1, 2), TensorLife(2, 100, 2, 3)]
    plan = plan_memory(lives)
    # 0 and 2 are never alive together: the arena holds two tensors, not three.
    assert plan.offset(0) == plan.offset(2) != plan.offset(1)
    assert plan.arena_bytes == 2 * aligned(100)


def test_the_largest_goes_first_at_offset_zero():
    plan = plan_memory([TensorLife(0, 10, 0, 5), TensorLife(1, 1000, 0, 5), TensorLife(2, 50, 0, 5)])
    assert plan.offset(1) == 0
    assert plan.arena_bytes == aligned(1000) + aligned(50) + aligned(10)


def test_in_place_when_the_input_dies_at_the_operator():
    lives = [TensorLife(0, 64, 0, 1), TensorLife(1, 64, 1, 2)]
    plan = plan_memory(lives, {1: 0})
    assert plan.offset(0) == plan.offset(1)
    assert plan.by_tensor()[1].shares == 0
    assert plan.arena_bytes == 64
    assert check_plan(plan, lives, {1: 0}) == []
    # The same plan without the operator's permission is a fault the checker names.
    assert check_plan(plan, lives, {}) == ["tensors 0 and 1 are alive together and share bytes"]


def test_no_in_place_when_the_input_is_read_later_or_smaller():
    read_later = [TensorLife(0, 64, 0, 2), TensorLife(1, 64, 1, 2)]
    plan = plan_memory(read_later, {1: 0})
    assert plan.offset(0) != plan.offset(1) and plan.by_tensor()[1].shares is None
    larger_output = [TensorLife(0, 32, 0, 1), TensorLife(1, 64, 1, 2)]
    plan = plan_memory(larger_output, {1: 0})
    assert plan.by_tensor()[1].shares is None
    assert _overlapping(plan, larger_output) == []


def test_an_in_place_chain_keeps_one_offset():
    lives = [TensorLife(0, 80, 0, 1), TensorLife(1, 80, 1, 2), TensorLife(2, 80, 2, 3), TensorLife(3, 16, 0, 3)]
    plan = plan_memory(lives, {1: 0, 2: 1})
    assert plan.offset(0) == plan.offset(1) == plan.offset(2)
    assert check_plan(plan, lives, {1: 0, 2: 1}) == []
    assert plan.arena_bytes == aligned(80) + aligned(16)


def test_check_plan_names_misaligned_and_overflowing_tensors():
    from edgetune.model.memory_plan import Allocation, MemoryPlan
    lives = [TensorLife(0, 20, 0, 0)]
    plan = MemoryPlan((Allocation(0, 8, 20, 0, 0),), 16)
    assert check_plan(plan, lives) == ["tensor 0 at offset 8 is not 16-byte aligned",
                                       "tensor 0 ends at 28, past the arena's 16 bytes"]


@pytest.mark.parametrize("model_file", MODEL_FILES)
def test_the_models_plans_are_sound_and_smaller_than_tflite_micros_arena(model_file):
    model = load_model(MODELS / model_file)
    steps = schedule(model, "m")
    plan = memory_plan(model, steps)
    by_step = {t: s for s in steps for t in s.outputs}
    lives = [TensorLife(a.tensor, a.nbytes, a.first, a.last) for a in plan.allocations]
    allowed = {a.tensor: a.shares for a in plan.allocations if a.shares is not None}
    assert check_plan(plan, lives, allowed) == []
    for tensor, source in allowed.items():  # in place only where the operator says so
        step = by_step[tensor]
        params = operator_params(model.graph, model.graph.operators[step.index])
        assert tensor == step.outputs[0] and source in [step.inputs[i] for i in params.in_place], (step.op, tensor)
    assert plan.arena_bytes <= plan.total_bytes
    largest = max(a.nbytes for a in plan.allocations)
    assert aligned(largest) <= plan.arena_bytes
    graph = model.graph
    io_bytes = graph.tensors[graph.inputs[0]].nbytes + graph.tensors[graph.outputs[0]].nbytes
    tflm = tflm_arena_bytes((MODELS / model_file).read_bytes(), graph.tensors[graph.inputs[0]].shape)
    assert tflm is not None and plan.arena_bytes + io_bytes <= tflm


def test_the_flatten_reshape_runs_in_place_where_its_input_dies():
    """DS-CNN's RESHAPE (the folded Flatten) after the average pool: one offset for both."""
    model = load_model(MODELS / "ds_cnn_kws.tflite")
    steps = schedule(model, "m")
    plan = memory_plan(model, steps)
    reshape = next(s for s in steps if s.op == "RESHAPE")
    assert plan.by_tensor()[reshape.outputs[0]].shares == reshape.inputs[0]
    assert all(s.op not in ("SHAPE", "STRIDED_SLICE", "PACK") for s in steps)


def test_a_layers_scratch_lives_during_its_step_beside_the_tensors_alive_then():
    """DS-CNN's shape of the problem: 8000-byte activations alternating, a 36 KB scratch at
    steps 2 and 4. Greedy by size alone puts every scratch at 0 and the activations above
    it; by first use they alternate below the scratch: the peak is one step's need."""
    lives = [TensorLife(t, 8000, t - 10, t - 9) for t in range(10, 16)]  # tensor t: written at t-10, read at t-9
    lives += [TensorLife(scratch_id(n), 36352, n, n) for n in (2, 4)]
    plan = plan_memory(lives)
    assert check_plan(plan, lives) == []
    assert plan.arena_bytes == 8000 + 8000 + 36352  # steps 2 and 4: input, output, scratch
    assert set(plan.scratch) == {2, 4} and all(a.first == a.last for a in plan.scratch.values())
    assert [a.tensor for a in plan.tensors] == list(range(10, 16))


def test_an_output_larger_than_its_input_joins_it_only_when_its_operator_reads_all_first():
    lives = [TensorLife(1, 100, 0, 1), TensorLife(2, 300, 1, 2), TensorLife(3, 50, 2, 3)]
    assert plan_memory(lives, {2: 1}).by_tensor()[2].shares is None
    plan = plan_memory(lives, {2: 1}, grows={2})
    assert plan.by_tensor()[2].shares == 1 and plan.offset(2) == plan.offset(1)
    assert plan.arena_bytes == aligned(300) + aligned(50)
    assert check_plan(plan, lives, {2: 1}) == []


def test_an_output_that_ends_where_its_input_ends_overlaps_its_tail():
    """MobileNet's first blocks: an 18 KB tensor, a depthwise layer over it in place, then a
    pointwise layer widening to 36 KB written to end where its input ends: the step needs the
    output's bytes only, not both."""
    lives = [TensorLife(1, 18432, 0, 1), TensorLife(2, 18432, 1, 2), TensorLife(3, 36864, 2, 3), TensorLife(4, 9216, 3, 4)]
    in_place = {2: 1, 3: 2}
    plan = plan_memory(lives, in_place, ends={3})
    by = plan.by_tensor()
    assert by[3].shares == 2 and by[3].end == by[2].end and by[3].offset < by[2].offset
    assert plan.arena_bytes == 36864 + 9216
    assert check_plan(plan, lives, in_place) == []
    without = plan_memory(lives, in_place)  # no end placement: the two live side by side at step 2
    assert without.arena_bytes == 18432 + 36864


def test_an_output_with_a_lag_starts_that_far_before_its_input_and_shares_the_rest():
    """A convolution that writes each pixel behind the reads still to come (in place with a
    lag): its output starts `lag` bytes (aligned up) before its input, the two overlapping for
    the rest, the chain one group only `lag` bytes longer than the input."""
    lives = [TensorLife(0, 1024, 0, 1), TensorLife(1, 1024, 1, 2), TensorLife(2, 512, 0, 2)]
    plan = plan_memory(lives, {1: 0}, lags={1: 100})
    by = plan.by_tensor()
    assert by[0].offset - by[1].offset == aligned(100) == 112
    assert by[1].shares == 0
    assert plan.arena_bytes == 1024 + 112 + 512
    assert check_plan(plan, lives, {1: 0}) == []
    # Without the lag the pair shares one offset; without in place it takes both.
    assert plan_memory(lives, {1: 0}).arena_bytes == 1024 + 512
    assert plan_memory(lives).arena_bytes == 2048 + 512
