"""The Ethos-U NPUs described in cortex-m55.toml, and the loader's errors for bad NPU data."""
from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from edgetune.hal import TargetError, load_target
from edgetune.targets import get_target, target_file
from edgetune.targets.vela import system_config_name, vela_ini

M55_TEXT = target_file("cortex-m55").read_text(encoding="utf-8")


def test_m55_board_carries_u55_and_u65():
    target = get_target("cortex-m55")
    u55, u65 = target.npu("ethos-u55"), target.npu("ethos-u65")
    assert u55.macs_per_cycle == (32, 64, 128, 256)
    assert u65.macs_per_cycle == (256, 512)
    assert [p.memory for p in u55.ports] == ["Sram", "OffChipFlash"]
    assert not u55.port("axi1").writable and u65.port("axi1").writable
    assert {m.name for m in u55.memory_modes} == {"Sram_Only", "Shared_Sram"}
    assert "Dedicated_Sram" in {m.name for m in u65.memory_modes}
    assert u55.accelerator(128) == "ethos-u55-128"
    for npu in (u55, u65):
        assert npu.source and all(p.source for p in npu.ports)
        for port in npu.ports:
            if port.region:
                target.region(port.region)  # every named region exists on the board
    with pytest.raises(KeyError, match="ethos-u85"):
        target.npu("ethos-u85")
    assert get_target("host").npus == ()


def test_every_described_configuration_is_one_vela_knows():
    from ethosu.vela.architecture_features import Accelerator

    known = {a.value for a in Accelerator}
    for npu in get_target("cortex-m55").npus:
        for macs in npu.macs_per_cycle:
            assert npu.accelerator(macs) in known


def test_vela_ini_is_generated_from_the_hal_data():
    target = get_target("cortex-m55")
    npu = target.npu("ethos-u65")
    ini = configparser.ConfigParser()
    ini.read_string(vela_ini(target, npu))
    system = ini[f"System_Config.{system_config_name(target, npu)}"]
    assert float(system["core_clock"]) == npu.clock_hz
    assert system["axi1_port"] == "Dram"
    assert float(system["Dram_clock_scale"]) == npu.port("axi1").clock_scale
    assert int(system["Dram_read_latency"]) == npu.port("axi1").read_latency
    dedicated = ini["Memory_Mode.Dedicated_Sram"]
    assert (dedicated["const_mem_area"], dedicated["arena_mem_area"], dedicated["cache_mem_area"]) == ("Axi1", "Axi1", "Axi0")


def _expect(tmp_path: Path, old: str, new: str, key: str, *words: str) -> None:
    assert M55_TEXT.count(old) >= 1, old
    path = tmp_path / "board.toml"
    path.write_text(M55_TEXT.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(TargetError) as info:
        load_target(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}: "), message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("old, new, key, words", [
    ("macs_per_cycle = [32, 64, 128, 256]", "macs_per_cycle = [32, 48]", "npus[0].macs_per_cycle[1]", ("48", "power of two")),
    ('name = "ethos-u55"', 'name = "ethos-u99"', "npus[0].name", ("ethos-u99",)),
    ('memory = "OffChipFlash"', 'memory = "Tape"', "npus[0].ports[1].memory", ("Tape",)),
    ('region = "qspi"', 'region = "nowhere"', "npus[0].ports[1].region", ("nowhere",)),
    ('arena = "axi0"', 'arena = "axi7"', "npus[0].memory_modes[0].arena", ("axi7",)),
    ("data_bits = 64", "data_bits = 63", "npus[0].ports[0].data_bits", ("63",)),
    ("writable = true", 'writable = "yes"', "npus[0].ports[0].writable", ("yes",)),
    ("invoke_cycles = 2_000", "invoke_cycles = -1", "npus[0].invoke_cycles", ("negative",)),
    ("copy_bytes_per_cycle = 4.0", "copy_bytes_per_cycle = 4.0\nturbo = true", "npus[0].turbo", ("unknown key",)),
])
def test_bad_npu_data_names_file_and_key(tmp_path, old, new, key, words):
    _expect(tmp_path, old, new, key, *words)
