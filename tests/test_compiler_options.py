"""The compiler's options as tunable parameters: the table, probing, the space, the build,
export and verify, and exact results for every option value."""
from __future__ import annotations

import json
import stat
from dataclasses import replace

import numpy as np
import pytest

from edgetune import api
from edgetune.codegen import get_kernel
from edgetune.codegen.compiler_options import option_cflags
from edgetune.codegen.manifest import MANIFEST, read_manifest, write_manifest
from edgetune.codegen.placement import pinned
from edgetune.hal import Compiler, TargetError, load_target
from edgetune.hal.compiler_options import (DEFAULT, FAMILIES, OPTION_NAMES, OPTION_PARAMS, all_option_flags,
                                           family_of, option_flag_sets)
from edgetune.hal.flags import flags_problem
from edgetune.evaluate import Evaluator
from edgetune.targets import target_file
from edgetune.targets import build as build_module
from edgetune.targets import iobuf
from edgetune.targets.runners import runner_for
from edgetune.targets.toolchain import MeasureError
from edgetune.targets.option_probe import _accepts, probe_compiler, with_accepted_options
from edgetune.tuner import Outcome, Space

REFUSED = "-fno-ivopts"
# Flags that change floating-point results: none of them may ever be in the table.
INEXACT = ("-ffast-math", "-fassociative-math", "-freciprocal-math", "-funsafe-math-optimizations",
           "-ffp-contract=fast", "-ffp-contract=on", "-Ofast", "-ffinite-math-only", "-fno-signed-zeros")


def options_target(name: str, options=("all",), tmp_path=None):
    target = load_target(target_file(name), overrides={"compiler_options": list(options)})
    return with_accepted_options(target)


def fake_gcc(tmp_path, refuse: str = REFUSED):
    """A 'gcc' that refuses one flag (as GCC does an unknown one) and logs every call."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "arm-none-eabi-gcc"
    log = tmp_path / "calls.log"
    script.write_text("#!/bin/sh\n"
                      f"echo \"$@\" >> {log}\n"
                      "if [ \"$1\" = --version ]; then echo 'fake gcc 1.0'; exit 0; fi\n"
                      f"for a in \"$@\"; do [ \"$a\" = {refuse} ] && echo 'unrecognized option' >&2 && exit 1; done\n"
                      "out=''; prev=''\n"
                      "for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
                      ": > \"$out\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


# --- the table --------------------------------------------------------------------------------

def test_every_parameter_starts_with_default_and_values_are_unique():
    for param in OPTION_PARAMS:
        assert param.values[0].name == DEFAULT and param.values[0].gcc == () and param.values[0].clang == ()
        names = [v.name for v in param.values]
        assert len(set(names)) == len(names), param.name


def test_every_flag_of_the_table_passes_the_target_file_allow_list():
    for family in FAMILIES:
        for flags in option_flag_sets(family):
            assert flags_problem(list(flags)) is None, flags


def test_no_flag_of_the_table_changes_floating_point_results():
    assert not all_option_flags() & set(INEXACT)
    assert not any(flag.startswith("-ffp-contract") for flag in all_option_flags())


def test_compiler_families_are_told_by_program_name():
    assert family_of("arm-none-eabi-gcc") == family_of("gcc-12") == family_of("/usr/bin/aarch64-linux-gnu-gcc") == "gcc"
    assert family_of("clang") == family_of("clang-14") == "clang"
    assert family_of("cc") is None


def test_a_target_file_may_only_name_the_tables_parameters():
    with pytest.raises(TargetError, match=r"compiler_options\[1\].*'-funroll-loops' is not a compiler-option"):
        load_target(target_file("cortex-m55"), overrides={"compiler_options": ["cc_unroll", "-funroll-loops"]})
    with pytest.raises(TargetError, match="listed twice"):
        load_target(target_file("cortex-m55"), overrides={"compiler_options": ["cc_unroll", "cc_unroll"]})


# --- probing ----------------------------------------------------------------------------------

def test_probing_drops_what_the_compiler_refuses_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache"))
    script, log = fake_gcc(tmp_path)
    compiler = Compiler(name="gcc", command=str(script), cflags=("-mcpu=cortex-m55",))
    accepted = probe_compiler(compiler)
    assert (REFUSED,) not in accepted
    assert set(option_flag_sets("gcc")) - {(REFUSED,)} == set(accepted)
    calls = log.read_text().count("-c probe.c")
    assert probe_compiler(compiler) == accepted  # the second answer comes from the cache
    assert log.read_text().count("-c probe.c") == calls
    entries = list((tmp_path / "cache" / "compiler-options").glob("*.json"))
    assert len(entries) == 1 and [REFUSED] not in json.loads(entries[0].read_text())["accepted"]
    # Another version line is another compiler: probed anew.
    assert probe_compiler(replace(compiler, cflags=("-mcpu=cortex-m4",))) == accepted
    assert log.read_text().count("-c probe.c") > calls


def test_a_real_compiler_refuses_an_unknown_option(tmp_path):
    (tmp_path / "probe.c").write_text("int f(int x) { return x + 1; }\n")
    command = ["gcc", "-std=c99", "-O3", "-Werror"]
    assert _accepts(command, (), tmp_path) is True
    assert _accepts(command, ("-fno-such-optimisation",), tmp_path) is False
    # Clang knows GCC's -fschedule-insns only to ignore it with a warning: -Werror refuses it.
    clang = ["clang", "-std=c99", "-O3", "-Werror"]
    assert _accepts(clang, ("-fschedule-insns", "-fsched-pressure"), tmp_path) is False


def test_real_compilers_accept_most_of_the_table():
    target = options_target("cortex-m55")
    for compiler in target.compilers:
        family = family_of(compiler.command)
        assert compiler.accepted_options <= set(option_flag_sets(family))
        assert len(compiler.accepted_options) >= len(option_flag_sets(family)) - 2, compiler.name


def test_nothing_is_probed_or_added_without_the_setting():
    target = with_accepted_options(load_target(target_file("cortex-m55")))
    assert all(not c.accepted_options for c in target.compilers)
    kernel = get_kernel("fir_q15")
    shape = kernel.parse_shape(kernel.example_shape())
    assert not set(kernel.tuning_space(target, shape).names) & set(OPTION_NAMES)


# --- the space --------------------------------------------------------------------------------

def refusing(target, compiler_name: str, flags: tuple[str, ...]):
    """The target as if one compiler had refused one flag set when probed."""
    compilers = tuple(replace(c, accepted_options=c.accepted_options - {flags}) if c.name == compiler_name else c
                      for c in target.compilers)
    return replace(target, compilers=compilers)


def test_the_space_offers_only_accepted_options():
    target = refusing(options_target("cortex-m55"), "gcc", ("-funroll-loops", "--param", "max-unroll-times=8"))
    kernel = get_kernel("fir_q15")
    shape = kernel.parse_shape(kernel.example_shape())
    space = kernel.tuning_space(target, shape)
    seen = set()
    for index in space.legal_indices()[::7]:
        config = space.config_at(int(index))
        compiler = target.compiler(str(config["compiler"]))
        for param in OPTION_PARAMS:
            flags = param.value(str(config[param.name])).flags(family_of(compiler.command))
            assert flags is not None and (not flags or flags in compiler.accepted_options), config.key()
            seen.add((compiler.name, param.name, str(config[param.name])))
    assert ("gcc", "cc_unroll", "x8") not in seen and ("clang", "cc_unroll", "x8") in seen
    assert ("gcc", "cc_vectorize", "unlimited") in seen and ("clang", "cc_vectorize", "unlimited") not in seen


def test_computed_legal_points_are_the_constraints_legal_points():
    target = refusing(options_target("cortex-m55", ("cc_unroll", "cc_vectorize")), "clang", ("-fno-unroll-loops",))
    kernel = get_kernel("fir_f32")
    shape = kernel.parse_shape(kernel.example_shape())
    space = kernel.tuning_space(target, shape)
    enumerated = Space(space.params, space.constraints)  # no precomputed list: every point checked
    assert np.array_equal(space.legal_indices(), enumerated.legal_indices())
    pin = pinned(space, target, "instructions")
    assert np.array_equal(pin.legal_indices(), Space(pin.params, pin.constraints).legal_indices())
    plain = kernel.tuning_space(load_target(target_file("cortex-m55")), shape)
    assert len(plain) < len(space) <= len(plain) * 16  # a bounded factor: 4 x 4 values per compiler


def test_stored_configurations_without_options_keep_their_meaning():
    target = options_target("cortex-m55")
    kernel = get_kernel("fir_q15")
    shape = kernel.parse_shape(kernel.example_shape())
    plain = kernel.tuning_space(load_target(target_file("cortex-m55")), shape)
    old = plain.config_at(int(plain.legal_indices()[0])).as_dict()
    config = kernel.tuning_space(target, shape).make(old)
    assert all(config[name] == DEFAULT for name in OPTION_NAMES)
    assert option_cflags(target, config) == ()


# --- the build, export and verify -------------------------------------------------------------

def test_chosen_options_reach_the_compilers_argument_list(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_CACHE", str(tmp_path / "cache"))
    target = options_target("host", ("cc_unroll", "cc_tweak"))
    kernel = get_kernel("fir_q15")
    shape = kernel.parse_shape("taps=8,block=16")
    space = kernel.tuning_space(target, shape)
    config = next(c for c in space
                  if c["compiler"] == "gcc" and c["cc_unroll"] == "x4" and c["cc_tweak"] == "no_ivopts")
    calls = []
    real = build_module.run_tool

    def recording(args, *rest, **kwargs):
        calls.append(list(args))
        return real(args, *rest, **kwargs)

    monkeypatch.setattr(build_module, "run_tool", recording)
    trial = Evaluator(kernel, target, shape, space, kernel.make_io(shape, np.random.default_rng(0)), tmp_path)(config)
    assert trial.outcome is Outcome.OK, trial.error
    compile_args = next(a for a in calls if "kernel.c" in a)
    at = compile_args.index("--param")
    assert compile_args[at - 1:at + 2] == ["-funroll-loops", "--param", "max-unroll-times=4"]
    assert "-fno-ivopts" in compile_args
    assert "--param max-unroll-times=4" in trial.info["cflags"]


def test_export_and_verify_build_with_the_chosen_options(tmp_path):
    board = tmp_path / "m55-options.toml"
    board.write_text('schema = 1\nextends = "cortex-m55"\nname = "m55-options"\n'
                     'compiler_options = ["cc_unroll", "cc_vectorize"]\n')
    db, out = tmp_path / "t.db", tmp_path / "out"
    start = "tile=4,unroll=2,vector=c,compiler=clang,opt=O2,cc_unroll=x4,cc_vectorize=no_slp"
    summary = api.tune("fir_q15", "taps=8,block=16", str(board), budget=1, jobs=1, db=db, initial=[start])
    assert summary.best.trial.config["cc_unroll"] == "x4"
    api.export(out, str(board), db=db)
    entry = read_manifest(out).kernels[0]
    assert entry.config_dict["cc_unroll"] == "x4" and entry.config_dict["cc_vectorize"] == "no_slp"
    assert entry.unit.cflags[-4:] == ("-O2", "-mllvm", "-unroll-count=4", "-fno-slp-vectorize")
    assert "-mllvm -unroll-count=4" in (out / "edgetune_kernels.mk").read_text()
    report = api.verify(out, str(board))
    assert report.ok, [v.problems for v in report.verdicts]
    # QEMU counts exactly: verify also rebuilt the variant as the trial ran it and found its count.
    assert report.verdicts[0].measured == report.verdicts[0].recorded


def test_an_export_naming_a_flag_outside_every_table_is_refused(tmp_path):
    board = tmp_path / "m55-options.toml"
    board.write_text('schema = 1\nextends = "cortex-m55"\nname = "m55-options"\ncompiler_options = ["cc_unroll"]\n')
    db, out = tmp_path / "t.db", tmp_path / "out"
    api.tune("fir_q15", "taps=8,block=16", str(board), budget=1, jobs=1, db=db,
             initial=["tile=4,unroll=2,vector=c,compiler=gcc,opt=O2,cc_unroll=x8"])
    api.export(out, str(board), db=db)
    data = json.loads((out / MANIFEST).read_text())
    data.pop("manifest_sha256")
    text = json.dumps(data)
    assert '"max-unroll-times=8"' in text
    # A --param the table does not hold: a valid flag shape, not one edgetune compiles with
    # (written with a fresh checksum, as a crafted manifest would be).
    write_manifest(out, json.loads(text.replace('"max-unroll-times=8"', '"max-inline-insns-auto=9999"')))
    kernel = get_kernel("fir_q15")
    shape = kernel.parse_shape("taps=8,block=16")
    work = tmp_path / "build"
    work.mkdir()
    with pytest.raises(MeasureError, match="'max-inline-insns-auto=9999' is not allowed"):
        runner_for(load_target(board)).build_export(kernel, shape, kernel.make_io(shape, np.random.default_rng(0)),
                                                    out, work)


# --- exact results ------------------------------------------------------------------------------

def raw_outputs(runner, kernel, target, shape, io, config, work) -> bytes:
    work.mkdir()
    build = runner.build(kernel, shape, io, kernel.render(target, shape, config), work)
    return runner.run(build, io)[1]


@pytest.mark.parametrize("kernel_name", ["fir_q15", "fir_f32"])
@pytest.mark.one_case
def test_every_option_value_keeps_results_exact(kernel_name, tmp_path):
    """Each value of each parameter (the others at default), with each compiler that offers
    it, on the M55: every output the same bit for bit as the same variant's without options
    (and the int kernel's equal to the reference)."""
    target = options_target("cortex-m55")
    kernel = get_kernel(kernel_name)
    shape = kernel.parse_shape("taps=12,block=40")
    space = kernel.tuning_space(target, shape)
    io = kernel.make_io(shape, np.random.default_rng(3))
    runner = runner_for(target)
    measured = 0
    for compiler in ("gcc", "clang"):
        base = {"tile": 4, "unroll": 2, "vector": "c", "compiler": compiler, "opt": "O3"}
        plain = raw_outputs(runner, kernel, target, shape, io, space.make(base), tmp_path / compiler)
        if kernel_name == "fir_q15":
            want = kernel.reference(shape, io)[0]
            assert np.array_equal(iobuf.unpack_outputs(io, plain)[0], want)
        for param in OPTION_PARAMS:
            for value in param.values[1:]:
                config = space.make({**base, param.name: value.name})
                if not space.is_legal(config):
                    assert value.flags(compiler) is None or value.reorders_float and kernel_name == "fir_f32", \
                        config.key()
                    continue
                got = raw_outputs(runner, kernel, target, shape, io, config, tmp_path / f"{compiler}-{measured}")
                assert got == plain, f"{config.key()}: the output differs from the variant's without options"
                measured += 1
    assert measured >= 20
