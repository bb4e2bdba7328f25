"""The search space of an NPU workload: Vela's options that change its schedule, declared
with the tuner's types and limited by what the HAL says the NPU and the board offer."""
from __future__ import annotations

from typing import Mapping

from edgetune.hal import Npu, Target
from edgetune.tuner import Constraint, Space, choice

from .operators import NpuOperator

# Bump when the generated TFLite model changes (quantisation, layout): results measured on
# an older model are then a different workload.
NPU_MODEL_VERSION = 1

# Vela 5.2 `vela --help`: --optimise and --tensor-allocator choices.
OPTIMISE_GOALS = ("Performance", "Size")
TENSOR_ALLOCATORS = ("HillClimb", "Greedy", "LinearAlloc")


def npu_space(target: Target, npu: Npu, operator: NpuOperator, shape: Mapping[str, int],
              macs: int | None = None) -> Space:
    """Vela's options for one workload; `macs` pins the accelerator configuration (a board's
    NPU has one), otherwise every configuration of the product is explored."""
    if macs is not None and macs not in npu.macs_per_cycle:
        raise ValueError(f"{npu.name} comes with {', '.join(map(str, npu.macs_per_cycle))} MACs per cycle, not {macs}")
    params = [
        choice("macs", (macs,) if macs is not None else npu.macs_per_cycle,
               f"{npu.product} MAC configuration (Vela --accelerator-config)"),
        choice("memory_mode", [m.name for m in npu.memory_modes], "where weights, arena and cache live (--memory-mode)"),
        choice("optimise", OPTIMISE_GOALS, "Vela's scheduling goal (--optimise)"),
        choice("arena_cache_size", npu.arena_cache_sizes, "arena/cache memory target in bytes (--arena-cache-size)"),
        choice("tensor_allocator", TENSOR_ALLOCATORS, "how Vela packs tensors into the arena (--tensor-allocator)"),
    ]
    constraints = []
    for mode in npu.memory_modes:
        port = npu.port(mode.cache_port)
        if port.region:
            capacity = target.region(port.region).size
            constraints.append(Constraint(
                f"arena_cache_size exceeds the {port.region} region behind {port.name} in {mode.name}",
                lambda c, name=mode.name, capacity=capacity: c["memory_mode"] != name or c["arena_cache_size"] <= capacity,
                reads=("memory_mode", "arena_cache_size")))
    return Space(params, constraints)
