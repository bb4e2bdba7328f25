"""The content-addressed cache of compiled variants: an identical variant is compiled and
linked once, whoever asks (another database, another session); anything that goes into it
changing is a miss; failures are replayed; entries appear whole or not at all."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.hal import load_target
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, tune
from edgetune.targets import buildcache, target_file
from edgetune.targets.buildcache import ArtifactStore, CachedFailure
from edgetune.targets.toolchain import MeasureError, ToolTimeout
from edgetune.tuner import Outcome, TuningDatabase

from allowed_tools import allowing
from faulty import FaultyMatmul

GCC_FLAGS = ["-march=armv8.1-m.main+mve.fp+fp.dp", "-mfloat-abi=hard", "-mthumb"]
CONFIG = {"tile_m": 1, "tile_n": 4, "unroll_k": 1, "vector": "c", "layout": "rowmajor", "compiler": "gcc", "opt": "O2"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of this test's own, so every count starts from nothing."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("EDGETUNE_CACHE", str(folder))
    return folder


class CountingGcc:
    """cortex-m55 whose compiler and linker are a wrapper around arm-none-eabi-gcc that logs
    every invocation: kernel compiles and image links can then be counted."""

    def __init__(self, folder: Path):
        self.log = folder / "gcc.log"
        (folder / "counting").mkdir()
        self.wrapper = folder / "counting" / "arm-none-eabi-gcc"  # named for its job, allowed by its path
        self.wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{self.log}"\nexec arm-none-eabi-gcc "$@"\n')
        self.wrapper.chmod(0o755)

    def target(self, extra_cflags: tuple[str, ...] = ()):
        with allowing(self.wrapper):
            return load_target(target_file("cortex-m55"), overrides={
                "compilers": [{"name": "gcc", "command": str(self.wrapper), "cflags": [*GCC_FLAGS, *extra_cflags]}],
                "firmware": {"linker": str(self.wrapper)}})

    def _lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def compiles(self) -> int:
        return sum(" -c kernel.c " in line for line in self._lines())

    def links(self) -> int:
        return sum("-o image.elf" in line for line in self._lines())


def evaluate(kernel, target, tmp_path, config=CONFIG, shape_text="m=4,n=4,k=8"):
    shape = kernel.parse_shape(shape_text)
    space = kernel.space(target, shape)
    io = kernel.make_io(shape, np.random.default_rng(3))
    return Evaluator(kernel, target, shape, space, io, tmp_path)(space.make(config))


@pytest.mark.parametrize("batch, images", [(1, 3), (None, 2)])
def test_the_same_variants_tuned_into_two_databases_are_built_once(matmul, cache, tmp_path, batch, images):
    gcc = CountingGcc(tmp_path)
    target, shape = gcc.target(), matmul.parse_shape("m=4,n=4,k=8")
    first_db, second_db = TuningDatabase(tmp_path / "a.db"), TuningDatabase(tmp_path / "b.db")
    first = tune(TuneRequest(matmul, target, shape, budget=3, jobs=2, seed=4, batch=batch), first_db)
    compiles, links = gcc.compiles(), gcc.links()
    # Three distinct variants, each compiled once; one image each, or (batched: a round of
    # three in two jobs) two of them sharing an image.
    assert compiles == 3 and links == images
    second = tune(TuneRequest(matmul, target, shape, budget=3, jobs=2, seed=4, batch=batch), second_db)
    assert (gcc.compiles(), gcc.links()) == (compiles, links)  # nothing built again
    before = {t.config: t for t in first_db.trials(first.workload)}
    after = {t.config: t for t in second_db.trials(second.workload)}
    assert before.keys() == after.keys()
    for config, trial in after.items():
        assert trial.outcome is before[config].outcome is Outcome.OK
        assert trial.values == before[config].values  # identical counts, code size, mix
        assert before[config].info["build_cache"] == "miss" and trial.info["build_cache"] == "hit"


def test_a_changed_flag_shape_or_source_misses(matmul, cache, tmp_path):
    gcc = CountingGcc(tmp_path)
    plain = evaluate(matmul, gcc.target(), tmp_path)
    again = evaluate(matmul, gcc.target(), tmp_path)
    assert plain.outcome is again.outcome is Outcome.OK, plain.error
    assert gcc.compiles() == 1 and again.info["build_cache"] == "hit"
    flagged = evaluate(matmul, gcc.target(extra_cflags=("-fno-common",)), tmp_path)
    assert flagged.outcome is Outcome.OK and flagged.info["build_cache"] == "miss" and gcc.compiles() == 2
    reshaped = evaluate(matmul, gcc.target(), tmp_path, shape_text="m=4,n=4,k=12")
    assert reshaped.info["build_cache"] == "miss" and gcc.compiles() == 3
    unrolled = evaluate(matmul, gcc.target(), tmp_path, config={**CONFIG, "unroll_k": 2})
    assert unrolled.info["build_cache"] == "miss" and gcc.compiles() == 4


def test_a_target_change_relinks_but_reuses_the_object(matmul, cache, tmp_path):
    gcc = CountingGcc(tmp_path)
    evaluate(matmul, gcc.target(), tmp_path)
    with allowing(gcc.wrapper):
        moved = load_target(target_file("cortex-m55"), overrides={
            "compilers": [{"name": "gcc", "command": str(gcc.wrapper), "cflags": GCC_FLAGS}],
            "firmware": {"linker": str(gcc.wrapper), "stack_size": 0x2000}})  # another linker script
    trial = evaluate(matmul, moved, tmp_path)
    assert trial.outcome is Outcome.OK, trial.error
    assert trial.info["build_cache"] == "object" and gcc.compiles() == 1 and gcc.links() == 2


@pytest.mark.parametrize("fault, outcome", [("syntax", Outcome.COMPILE_ERROR), ("huge", Outcome.TOO_LARGE)])
def test_a_failing_variant_is_not_built_again_and_fails_the_same_way(cache, tmp_path, fault, outcome):
    gcc = CountingGcc(tmp_path)
    kernel = FaultyMatmul(fault, always=True)
    first = evaluate(kernel, gcc.target(), tmp_path)
    builds = gcc.compiles(), gcc.links()
    second = evaluate(kernel, gcc.target(), tmp_path)
    assert first.outcome is second.outcome is outcome, first.error
    assert second.error == first.error and second.info["build_cache"] == "hit"
    assert (gcc.compiles(), gcc.links()) == builds


def test_the_cache_is_shared_by_processes_and_entries_appear_whole(cache, tmp_path):
    # Several processes build the same key at once: each sees either nothing or a whole entry,
    # and afterwards exactly one complete entry is left, with no staging folders.
    script = ("import sys; from pathlib import Path; from edgetune.targets.buildcache import ArtifactStore\n"
              "work = Path(sys.argv[1]); work.mkdir()\n"
              "def build():\n"
              "    (work / 'x.o').write_bytes(b'A' * 1_000_000); return [work / 'x.o'], {'n': 1}\n"
              "meta, hit = ArtifactStore('objects').get_or_build('ab' * 32, work, build)\n"
              "assert meta['n'] == 1 and (work / 'x.o').read_bytes() == b'A' * 1_000_000\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"w{i}")], env=os.environ)
             for i in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    shard = cache / "variants" / "objects" / "ab"
    assert [p.name for p in shard.iterdir()] == ["ab" * 32]
    assert sorted(p.name for p in (shard / ("ab" * 32)).iterdir()) == ["meta.json", "x.o"]


def test_threads_building_one_key_build_it_once(cache, tmp_path):
    store, built = ArtifactStore("objects"), []

    def build():
        built.append(1)
        (tmp_path / "x.o").write_bytes(b"object")
        return [tmp_path / "x.o"], {}

    threads = [threading.Thread(target=store.get_or_build, args=("cd" * 32, tmp_path, build)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == [1]


def test_a_timed_out_build_is_not_cached_but_a_failed_one_is(cache, tmp_path):
    store, calls = ArtifactStore("images"), []

    def slow():
        calls.append("slow")
        raise ToolTimeout(Outcome.COMPILE_ERROR, "cc did not finish within 120 s")

    def broken():
        calls.append("broken")
        raise MeasureError(Outcome.COMPILE_ERROR, "cc failed (exit 1)")

    for _ in range(2):
        with pytest.raises(ToolTimeout):
            store.get_or_build("ef" * 32, tmp_path, slow)
    for _ in range(2):
        with pytest.raises(MeasureError, match=r"cc failed \(exit 1\)") as err:
            store.get_or_build("ef" * 32, tmp_path, broken)
    assert isinstance(err.value, CachedFailure) and err.value.outcome is Outcome.COMPILE_ERROR
    assert calls == ["slow", "slow", "broken"]


def _entry(cache: Path, key: str, size: int, mtime: float) -> None:
    folder = cache / "variants" / "images" / key[:2] / key
    folder.mkdir(parents=True)
    (folder / "image.elf").write_bytes(b"x" * size)
    (folder / "meta.json").write_text("{}")
    os.utime(folder, (mtime, mtime))


def test_prune_removes_the_least_recently_used_first(cache):
    for n, key in enumerate(("11" * 32, "22" * 32, "33" * 32)):
        _entry(cache, key, 1000, mtime=1_000_000 + n)
    stale = cache / "variants" / "images" / "11" / ".tmp-killed"  # a killed process's leftover
    stale.mkdir()
    os.utime(stale, (1_000_000, 1_000_000))
    fresh = cache / "variants" / "images" / "22" / ".tmp-busy"  # another process publishing now
    fresh.mkdir()
    removed, freed = buildcache.prune(2100)
    assert not stale.exists() and fresh.exists()
    assert removed == 1 and freed >= 1000
    assert not (cache / "variants" / "images" / "11").joinpath("11" * 32).exists()
    assert (cache / "variants" / "images" / "33" / ("33" * 32)).exists()


def test_cache_command_reports_prunes_and_clears(matmul, cache, tmp_path):
    evaluate(matmul, load_target(target_file("cortex-m55")), tmp_path)
    stranger = cache / "notes.txt"  # the folder may hold other things: they are left alone
    stranger.write_text("mine")
    runner = CliRunner()
    info = runner.invoke(main, ["cache", "info"])
    assert info.exit_code == 0, info.output
    assert str(cache) in info.output
    lines = {line.split()[0]: line.split() for line in info.output.splitlines()[1:]}
    assert lines["variants/objects"][1] == "1" and lines["variants/images"][1] == "1"
    assert int(lines["objects"][1]) >= 3  # the harness objects
    pruned = runner.invoke(main, ["cache", "prune", "--max-mb", "0"])
    assert pruned.exit_code == 0 and "removed 2 " in pruned.output, pruned.output
    cleared = runner.invoke(main, ["cache", "clear"])
    assert cleared.exit_code == 0, cleared.output
    assert all(u.entries == 0 for u in buildcache.usage())
    assert stranger.read_text() == "mine"
    bad = runner.invoke(main, ["cache", "prune", "--max-mb", "-1"])
    assert bad.exit_code == 2


@pytest.mark.parametrize("where", ["a-file", "a-file/sub"])
def test_a_cache_folder_that_cannot_be_made_is_one_line_naming_it(tmp_path, monkeypatch, where):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / where))
    for args in (["cache", "info"], ["tune", "matmul_s8", "--target", "host", "--shape", "m=2,n=2,k=2", "--budget", "1",
                                     "--db", str(tmp_path / "t.db")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        [line] = [line for line in result.output.splitlines() if line.strip()]
        assert line.startswith(f"edgetune: error: EDGETUNE_CACHE={tmp_path / where}: "), line
