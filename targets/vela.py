"""Running Arm's Vela compiler on a TFLite model and reading its performance estimates.

Vela (ethos-u-vela) compiles a TFLite model for an Ethos-U NPU and estimates, per layer and
for the network, NPU cycles, total cycles including memory access, and memory use. edgetune
describes the board's memory system in the HAL; this module turns that into a Vela .ini
(one System_Config per board and NPU, one Memory_Mode per mode the HAL lists), runs Vela in
a subprocess with an argument list (a crash of its native core cannot take edgetune down),
and reads the summary CSV it writes with `--verbose-performance`.

A configuration Vela refuses, or an operator it leaves on the CPU, is a MeasureError with
Vela's own reason: the session records it as a failed trial.
"""
from __future__ import annotations

import csv
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from edgetune.hal import Npu, Target
from edgetune.tuner import Outcome

from .toolchain import MeasureError, ToolMissing

VELA_TIMEOUT_S = 120.0
# Vela 5.2 `vela --help`: --optimise and --tensor-allocator choices (the NPU search space,
# edgetune.npu.space, offers them; the options are checked against them here, where Vela runs).
OPTIMISE_GOALS = ("Performance", "Size")
TENSOR_ALLOCATORS = ("HillClimb", "Greedy", "LinearAlloc")
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_]{1,64}$")


def check_vela() -> None:
    try:
        found = importlib.util.find_spec("ethosu.vela") is not None
    except ModuleNotFoundError:  # find_spec imports the parent package, `ethosu`, which is absent too
        found = False
    if not found:
        raise ToolMissing("ethos-u-vela: not installed (run scripts/setup.sh, or pip install 'edgetune[npu]')")


def vela_version() -> str:
    check_vela()
    return importlib.metadata.version("ethos-u-vela")


def system_config_name(target: Target, npu: Npu) -> str:
    """An .ini section name for the board's memory system as seen by one NPU."""
    return re.sub(r"[^A-Za-z0-9]", "_", f"edgetune_{target.name}_{npu.name}")


def vela_ini(target: Target, npu: Npu) -> str:
    """The Vela configuration file for `npu` on `target`, from the HAL's data only.
    Keys: Vela 5.2 OPTIONS.md, "Configuration File" (System_Config / Memory_Mode sections)."""
    lines = ["; written by edgetune from " + (Path(target.source_file).name or target.name),
             f"[System_Config.{system_config_name(target, npu)}]", f"core_clock={npu.clock_hz}"]
    for port in npu.ports:
        lines.append(f"{port.name}_port={port.memory}")
    for port in npu.ports:
        m = port.memory
        lines += [f"{m}_clock_scale={port.clock_scale}", f"{m}_burst_length={port.burst_length}",
                  f"{m}_read_latency={port.read_latency}", f"{m}_write_latency={port.write_latency}",
                  f"{m}_max_reads={port.max_reads}", f"{m}_max_writes={port.max_writes}"]
    for mode in npu.memory_modes:
        lines += ["", f"[Memory_Mode.{mode.name}]", f"const_mem_area={mode.const_port.capitalize()}",
                  f"arena_mem_area={mode.arena_port.capitalize()}", f"cache_mem_area={mode.cache_port.capitalize()}"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class VelaOptions:
    """The Vela options that change its schedule: one point of the NPU search space."""

    macs: int
    memory_mode: str
    optimise: str
    arena_cache_size: int
    tensor_allocator: str

    @classmethod
    def from_config(cls, values: dict) -> "VelaOptions":
        return cls(macs=int(values["macs"]), memory_mode=str(values["memory_mode"]), optimise=str(values["optimise"]),
                   arena_cache_size=int(values["arena_cache_size"]), tensor_allocator=str(values["tensor_allocator"]))

    def arguments(self, npu: Npu, system_config: str) -> list[str]:
        if self.optimise not in OPTIMISE_GOALS or self.tensor_allocator not in TENSOR_ALLOCATORS:
            raise ValueError(f"unknown Vela option value in {self}")
        npu.memory_mode(self.memory_mode)  # KeyError for a mode the HAL does not describe
        return ["--accelerator-config", npu.accelerator(self.macs), "--system-config", system_config,
                "--memory-mode", self.memory_mode, "--optimise", self.optimise,
                "--arena-cache-size", str(self.arena_cache_size), "--tensor-allocator", self.tensor_allocator]


@dataclass(frozen=True)
class VelaResult:
    values: dict = field(hash=False)  # npu_cycles, total_cycles, sram_bytes, ...
    info: dict = field(hash=False)
    compiled: Path  # the *_vela.tflite with the NPU command stream


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _number(row: dict, key: str, where: Path) -> float:
    try:
        return float(row[key])
    except (KeyError, ValueError):
        raise MeasureError(Outcome.RUNTIME_ERROR, f"{where.name}: no numeric {key!r} in Vela's summary") from None


def compile_model(model: bytes, name: str, target: Target, npu: Npu, options: VelaOptions, workdir: Path) -> VelaResult:
    """Compile one model with Vela and return its estimates (MeasureError when Vela refuses)."""
    if not _MODEL_NAME.fullmatch(name):
        raise ValueError(f"model name {name!r} must be letters, digits and underscores")
    check_vela()
    workdir.mkdir(parents=True, exist_ok=True)
    model_path = workdir / f"{name}.tflite"
    model_path.write_bytes(model)
    ini = workdir / "edgetune_vela.ini"
    ini.write_text(vela_ini(target, npu), encoding="utf-8")
    out_dir = workdir / "vela_out"
    system_config = system_config_name(target, npu)
    try:
        args = [sys.executable, "-m", "ethosu.vela", str(model_path), "--output-dir", str(out_dir), "--config", str(ini),
                *options.arguments(npu, system_config), "--verbose-performance", "--show-cpu-operations"]
    except (KeyError, ValueError) as exc:
        raise MeasureError(Outcome.INVALID, str(exc.args[0])) from None
    try:
        proc = subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=VELA_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MeasureError(Outcome.TIMEOUT, f"vela did not finish within {VELA_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        raise MeasureError(Outcome.COMPILE_ERROR, f"vela refused it (exit {proc.returncode}): "
                                                  f"{_last_line(proc.stderr or proc.stdout)}")
    per_layer = out_dir / f"{name}_per-layer.csv"
    summary = out_dir / f"{name}_summary_{system_config}.csv"
    compiled = out_dir / f"{name}_vela.tflite"
    for path in (per_layer, summary, compiled):
        if not path.is_file():
            raise MeasureError(Outcome.RUNTIME_ERROR, f"vela wrote no {path.name} ({_last_line(proc.stdout)})")
    with per_layer.open(newline="", encoding="utf-8") as f:
        layers = list(csv.DictReader(f))
    on_cpu = [row for row in layers if row.get("Target", "").strip().upper() != "NPU"]
    if on_cpu or not layers:
        reasons = [line.strip() for line in proc.stdout.splitlines() if "CPU" in line and "operators" not in line]
        ops = ", ".join(row.get("Original Operator", "?") for row in on_cpu) or "every operator"
        raise MeasureError(Outcome.COMPILE_ERROR, f"vela left {ops} on the CPU" +
                           (f": {' '.join(reasons[:3])}" if reasons else ""))
    with summary.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 1:
        raise MeasureError(Outcome.RUNTIME_ERROR, f"{summary.name}: expected one summary row, got {len(rows)}")
    row = rows[0]
    total = _number(row, "cycles_total", summary)
    macs = _number(row, "nn_macs", summary)
    kib = 1024.0
    values = {
        # The objective of NPU workloads: total_cycles (NPU cycles with memory stalls, Vela's
        # cycles_total), in NPU clock cycles.
        "total_cycles": int(total),
        "npu_cycles": int(_number(row, "cycles_npu", summary)),
        "sram_access_cycles": int(_number(row, "cycles_sram_access", summary)),
        "offchip_access_cycles": int(_number(row, "cycles_off_chip_flash_access", summary)
                                     + _number(row, "cycles_dram_access", summary)),
        "sram_bytes": int(round(_number(row, "sram_memory_used", summary) * kib)),
        "offchip_bytes": int(round((_number(row, "off_chip_flash_memory_used", summary)
                                    + _number(row, "dram_memory_used", summary)) * kib)),
        "sram_traffic_bytes": int(_number(row, "sram_total_bytes", summary)),
        "offchip_traffic_bytes": int(_number(row, "off_chip_flash_total_bytes", summary)
                                     + _number(row, "dram_total_bytes", summary)),
        "layer_macs": int(macs),
        "mac_utilisation_pct": round(100.0 * macs / (total * options.macs), 3) if total else 0.0,
        "npu_layers": len(layers),
        "model_bytes": compiled.stat().st_size,
    }
    info = {"vela_version": vela_version(), "compiler_version": f"vela {vela_version()}", "accelerator": npu.accelerator(options.macs),
            "system_config": system_config, "weights_area": row.get("weights_storage_area", ""),
            "feature_map_area": row.get("feature_map_storage_area", "")}
    return VelaResult(values=values, info=info, compiled=compiled)
