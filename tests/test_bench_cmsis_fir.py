"""bench/cmsis_fir.py without the network: which sdist members it unpacks, and the wrapper
it renders around arm_fir_q15 (the library itself is only downloaded by the bench)."""
import io
import tarfile
from pathlib import Path

import pytest

from bench_scripts import load_bench


def _module():
    return load_bench("cmsis_fir")


def _archive(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_only_headers_and_the_two_fir_sources_are_wanted():
    lib = _module()
    top = lib.ROOT
    assert lib.wanted(f"{top}/Source/FilteringFunctions/arm_fir_q15.c")
    assert lib.wanted(f"{top}/Source/FilteringFunctions/arm_fir_init_q15.c")
    assert lib.wanted(f"{top}/Include/dsp/filtering_functions.h")
    assert lib.wanted(f"{top}/PrivateInclude/arm_compiler_specific.h")
    assert not lib.wanted(f"{top}/Source/FilteringFunctions/arm_fir_f32.c")
    assert not lib.wanted(f"{top}/setup.py")
    assert not lib.wanted(f"{top}/Include/../../evil.h")
    assert not lib.wanted("other-1.0/Include/arm_math.h")


def test_unpack_takes_the_wanted_members_and_nothing_else(tmp_path):
    lib = _module()
    top = lib.ROOT
    archive = tmp_path / "lib.tar.gz"
    _archive(archive, {f"{top}/{lib.FIR_SOURCES[0]}": b"init", f"{top}/{lib.FIR_SOURCES[1]}": b"fir",
                       f"{top}/Include/arm_math.h": b"h", f"{top}/setup.py": b"x", f"{top}/../escape.h": b"no"})
    lib.unpack(archive, tmp_path / "out")
    found = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert found == sorted([f"{top}/{lib.FIR_SOURCES[0]}", f"{top}/{lib.FIR_SOURCES[1]}", f"{top}/Include/arm_math.h"])
    assert not (tmp_path / "escape.h").exists()


def test_unpack_names_a_missing_fir_source(tmp_path):
    lib = _module()
    archive = tmp_path / "lib.tar.gz"
    _archive(archive, {f"{lib.ROOT}/{lib.FIR_SOURCES[0]}": b"init"})
    with pytest.raises(lib.SourcesUnavailable, match="arm_fir_q15.c"):
        lib.unpack(archive, tmp_path / "out")


def test_an_unpacked_cache_is_used_without_downloading(tmp_path):
    lib = _module()
    folder = tmp_path / "cmsisdsp" / lib.VERSION
    folder.mkdir(parents=True)
    (folder / ".unpacked").write_text(lib.VERSION)
    assert lib.library_root(tmp_path) == folder / lib.ROOT


def test_the_wrapper_calls_the_library_once_after_its_setup(tmp_path):
    lib = _module()
    for name in lib.FIR_SOURCES:  # stand-ins: Arm's files start with a byte-order mark
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("\ufeff/* " + Path(name).name + " */\n", encoding="utf-8")
    source = lib.wrapper_source(tmp_path, "et_fir", taps=30, block=100)
    assert "\ufeff" not in source
    assert source.index("arm_fir_init_q15.c */") < source.index("arm_fir_q15.c */") < source.index("void et_fir(")
    assert "LIB_TAPS = 30, LIB_BLOCK = 100" in source
    assert source.count("lib_filter(&lib_fir, x + LIB_TAPS - 1, y, LIB_BLOCK);") == 1
    setup_only = lib.wrapper_source(tmp_path, "et_fir", taps=30, block=100, call=False)
    assert "lib_filter(&lib_fir" not in setup_only and "(void)y;" in setup_only
    assert setup_only.split("void et_fir(")[0] == source.split("void et_fir(")[0]  # the same setup in both


def test_the_build_selects_helium_at_o3(tmp_path):
    flags = _module().library_cflags(tmp_path)
    assert {"-O3", "-DARM_MATH_MVEI", "-DARM_MATH_HELIUM"} <= set(flags)
    assert f"-I{tmp_path / 'Include'}" in flags
