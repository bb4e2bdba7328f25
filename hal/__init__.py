"""edgetune.hal: targets described as data (TOML -> frozen dataclasses).

Imports nothing else of edgetune's: every other part may use it.
"""
from .cost import INSTRUCTION_CLASSES, ClassCost, CostModel, Estimate
from .host import detect_host
from .loader import SCHEMA_VERSION, TargetError, load_target, read_target_data, shipped_unit_names, target_from_data
from .model import (Cache, Compiler, Core, Firmware, MemoryRegion, Npu, NpuMemoryMode, NpuPort, Placement, PowerEnvelope,
                    Measures, RenodePlatform, RunnerKind, RunnerSettings, SerialLink, Target, VectorUnit)

__all__ = ["INSTRUCTION_CLASSES", "ClassCost", "CostModel", "Estimate", "Cache", "Compiler", "Core", "Firmware",
           "MemoryRegion", "Npu", "NpuMemoryMode", "NpuPort", "Placement", "PowerEnvelope", "Measures", "RenodePlatform", "RunnerKind", "RunnerSettings",
           "SerialLink", "SCHEMA_VERSION", "Target", "TargetError", "VectorUnit", "detect_host", "load_target",
           "read_target_data", "shipped_unit_names",
           "target_from_data"]
