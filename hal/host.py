"""Detect the machine edgetune runs on (Linux, x86-64): cores, clock, vector ISA, caches.

Returns plain data shaped like a target file's tables, merged over `host.toml` by the
loader, so a detected host is validated exactly like a written one.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

# Vector ISAs edgetune can generate code for, from /proc/cpuinfo flags. Lane counts follow
# from the register width; MAC rates are left at 0 (not published per core in one figure).
_X86_VECTOR_UNITS = (
    # (name, required flags, register bits, registers)
    ("sse4.2", {"sse4_2"}, 128, 16),
    ("avx2", {"avx2", "fma"}, 256, 16),
    ("avx512", {"avx512f", "avx512bw", "avx512vl"}, 512, 32),
    # VPDPBUSD (u8 x s8 dot products of four bytes into int32 lanes): AVX-VNNI is its
    # VEX-encoded 256-bit form (Alder Lake, Zen 5), AVX512-VNNI the EVEX one (Ice Lake, Zen 4).
    # Listed as units of their own so a path needing them is offered only where they exist.
    ("avxvnni", {"avx2", "fma", "avx_vnni"}, 256, 16),
    ("avx512vnni", {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}, 512, 32),
)
# Every unit a detected host may have, whichever this machine has.
DETECTABLE_UNITS = frozenset(name for name, *_ in _X86_VECTOR_UNITS)


def _lanes(register_bits: int) -> dict[str, int]:
    return {"int8": register_bits // 8, "int16": register_bits // 16, "int32": register_bits // 32,
            "float32": register_bits // 32}


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return info
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block is enough
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def _size_bytes(text: str) -> int:
    text = text.strip().upper()
    scale = 1
    if text.endswith("K"):
        scale, text = 1024, text[:-1]
    elif text.endswith("M"):
        scale, text = 1024 * 1024, text[:-1]
    return int(text) * scale


def _caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> list[dict]:
    caches = []
    kinds = {"Data": "data", "Instruction": "instruction", "Unified": "unified"}
    for index in sorted(root.glob("index*")):
        try:
            caches.append({
                "level": int((index / "level").read_text()),
                "kind": kinds.get((index / "type").read_text().strip(), "unified"),
                "size": _size_bytes((index / "size").read_text()),
                "line": int((index / "coherency_line_size").read_text()),
            })
        except (OSError, ValueError):
            continue  # a cache the kernel describes oddly is left out, not guessed
    return caches


def detect_host() -> dict:
    """Facts about this machine as target-file tables (see host.toml)."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    units = [{"name": name, "register_bits": bits, "registers": regs, "lanes": _lanes(bits),
              "source": "detected from /proc/cpuinfo flags: " + " ".join(sorted(need))}
             for name, need, bits, regs in _X86_VECTOR_UNITS if need <= flags]
    try:
        mhz = float(info.get("cpu MHz", "0"))
    except ValueError:
        mhz = 0.0
    core = {"name": info.get("model name", platform.processor() or "x86-64"),
            "isa": platform.machine() or "x86_64",
            "count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
            "source": "detected from /proc/cpuinfo and the scheduler's CPU set"}
    if mhz > 0:
        core["clock_hz"] = int(mhz * 1e6)
    data: dict = {"core": core, "vector_units": units}
    caches = _caches()
    if caches:
        data["caches"] = caches
    return data
