"""The VNNI paths of matmul_s8 and conv2d_s8 (vector=avxvnni, avx512vnni: VPDPBUSD on packed
weights, A offset by 128 into u8 and the offset folded into the packed term): offered only
where the target describes the unit (a written target without it never proposes them), packed
weights only, the packing identity in numpy and in the exported C helper, bit-exact on odd
shapes with zero points at the int8 extremes (per-tensor matmul, per-channel conv, and
against TFLite Micro), no undefined behaviour on unaligned buffers, a clear stop when built
without the ISA flag, and `edgetune tune` / `export` / `verify` end to end on the host."""
from __future__ import annotations

import ctypes
import dataclasses
import json
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen.kernels.base import COMMON_CFLAGS, Buffer, KernelIO
from edgetune.hal import VectorUnit, load_target
from edgetune.evaluate import Evaluator
from edgetune.targets.build import kernel_header
from edgetune.tuner import Outcome, TuningDatabase
from kernel_checks import build_shared, draw_conv_shape, misaligned, run_against_tflm
from kernel_runs import assert_ok, complete

PATHS = ("avxvnni", "avx512vnni")
BASE_UNIT = {"avxvnni": "avx2", "avx512vnni": "avx512"}
UNITS = {"avx2": (256, 16), "avx512": (512, 32), "avxvnni": (256, 16), "avx512vnni": (512, 32)}
MATMUL_SHAPES = ("m=1,n=1,k=1", "m=3,n=17,k=63", "m=5,n=9,k=65", "m=2,n=33,k=130", "m=7,n=5,k=3")
CONV_SHAPES = ("h=5,w=4,cin=3,cout=5,kh=3,kw=3,stride=1,pad=1,dilation=1",
               "h=6,w=5,cin=19,cout=7,kh=3,kw=2,stride_h=2,stride_w=1,pad_top=0,pad_bottom=1,pad_left=1,pad_right=0",
               "h=4,w=3,cin=70,cout=9,kh=1,kw=1,stride=1,pad=0,dilation=1")
EXTREMES = ((-128, -128), (-128, 127), (127, -128), (127, 127))


def unit(name: str) -> VectorUnit:
    bits, registers = UNITS[name]
    return VectorUnit(name=name, register_bits=bits, registers=registers,
                      lanes=(("int8", bits // 8), ("int16", bits // 16), ("int32", bits // 32), ("float32", bits // 32)))


def with_units(target, *names):
    """The target described with exactly these x86 vector units (what a CPU would report)."""
    return dataclasses.replace(target, vector_units=tuple(unit(n) for n in names))


def vectors(kernel, target, shape_text):
    return kernel.space(target, kernel.parse_shape(shape_text)).param("vector").values


def runnable(host, path) -> bool:
    """Whether this machine has the path's unit (the checks that run code need it)."""
    return host.has_vector(path)


# --- legality ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["matmul", "conv"])
def test_vnni_paths_follow_exactly_the_described_units(request, host, name):
    kernel = request.getfixturevalue(name)
    shape = MATMUL_SHAPES[1] if name == "matmul" else CONV_SHAPES[0]
    cases = {("avx2", "avx512"): [], ("avx2", "avxvnni"): ["avxvnni"],
             ("avx2", "avx512", "avx512vnni"): ["avx512vnni"],
             ("avx2", "avx512", "avxvnni", "avx512vnni"): ["avxvnni", "avx512vnni"]}
    for units, offered in cases.items():
        values = vectors(kernel, with_units(host, *units), shape)
        assert [v for v in values if v in PATHS] == offered, units
        assert {"avx2", "avx512"} & set(units) <= set(values)  # the older paths stay where they were
    # On this machine: offered exactly where the detection found the unit.
    assert [v for v in vectors(kernel, host, shape) if v in PATHS] == [p for p in PATHS if host.has_vector(p)]


def test_a_written_x86_target_without_vnni_never_proposes_it(matmul, conv, tmp_path):
    """A target file (no detection) that lists AVX2 and AVX-512 but no VNNI unit."""
    file = tmp_path / "skylake.toml"
    file.write_text('schema = 1\nname = "skylake-x"\ndescription = "AVX-512 without VNNI"\narch = "x86_64"\n'
                    '[core]\nname = "skylake-x"\nisa = "x86-64"\ncount = 1\nclock_hz = 3_000_000_000\n'
                    '[[vector_units]]\nname = "avx2"\nregister_bits = 256\nregisters = 16\n'
                    'lanes = { int8 = 32, int16 = 16, int32 = 8, float32 = 8 }\n'
                    '[[vector_units]]\nname = "avx512"\nregister_bits = 512\nregisters = 32\n'
                    'lanes = { int8 = 64, int16 = 32, int32 = 16, float32 = 16 }\n'
                    '[runner]\nkind = "native"\ntimeout_s = 30\n'
                    '[[compilers]]\nname = "gcc"\ncommand = "gcc"\ncflags = ["-march=skylake-avx512"]\n')
    target = load_target(file)
    for kernel, shape in ((matmul, MATMUL_SHAPES[2]), (conv, CONV_SHAPES[1])):
        values = vectors(kernel, target, shape)
        assert "avx512" in values and not set(PATHS) & set(values)
    file.write_text(file.read_text().replace(
        '[runner]', '[[vector_units]]\nname = "avx512vnni"\nregister_bits = 512\nregisters = 32\n'
                    'lanes = { int8 = 64, int16 = 32, int32 = 16, float32 = 16 }\n[runner]'))
    assert [v for v in vectors(matmul, load_target(file), MATMUL_SHAPES[2]) if v in PATHS] == ["avx512vnni"]


@pytest.mark.parametrize("path", PATHS)
def test_vnni_spaces_hold_packed_weights_only_within_the_registers(matmul, conv, host, path):
    target = with_units(host, BASE_UNIT[path], path)
    registers = UNITS[path][1]
    space = matmul.space(target, matmul.parse_shape("m=64,n=64,k=64"))
    configs = [c for c in space if c["vector"] == path]
    assert configs and {c["layout"] for c in configs} == {"packed"}
    assert all(c["tile_m"] * c["tile_n"] + c["tile_m"] + 2 <= registers for c in configs)
    assert max(c["tile_m"] * c["tile_n"] for c in configs) > 4
    rowmajor = space.make({"tile_m": 1, "tile_n": 8, "unroll_k": 1, "vector": path, "layout": "rowmajor",
                           "compiler": "gcc", "opt": "O2"})
    assert "packed weights only" in space.violation(rowmajor)
    step = 32 if path == "avxvnni" else 64
    short = matmul.space(target, matmul.parse_shape("m=3,n=5,k=70"))
    assert all(c["unroll_k"] == 1 or step * c["unroll_k"] <= 70 for c in short if c["vector"] == path)
    conv_space = conv.space(target, conv.parse_shape(CONV_SHAPES[0]))
    conv_configs = [c for c in conv_space if c["vector"] == path]
    assert conv_configs and {c["layout"] for c in conv_configs} == {"packed"}
    assert all(c["tile_p"] * c["tile_oc"] + c["tile_p"] + 2 <= registers for c in conv_configs)


# --- the packing identity ---------------------------------------------------------------------------
@pytest.mark.parametrize("a_zero, b_zero", EXTREMES)
def test_matmul_packing_folds_the_offset_of_a_into_the_column_term(matmul, host, a_zero, b_zero, rng):
    """What the VNNI kernel computes: dot(a + 128, b) - b_zero * sum(a + 128) + col_term, equal
    to the zero-point corrected accumulator."""
    target = with_units(host, "avx2", "avx512", *PATHS)
    shape = matmul.parse_shape("m=4,n=11,k=45")
    io = matmul.make_io(shape, rng, edge="extreme")
    a, b, bias = (buf.data.astype(np.int64) for buf in io.buffers[:3])
    params = dict(io.params, a_zero=a_zero, b_zero=b_zero)
    io = KernelIO(buffers=io.buffers, params=tuple(params.items()))
    want = (a - a_zero) @ (b - b_zero) + bias
    space = matmul.space(target, shape)
    for path in PATHS:
        deployed = matmul.deployed_io(io, complete(space, {"vector": path}))
        b_packed, col_term = (buf.data.astype(np.int64) for buf in deployed.buffers[1:3])
        assert np.array_equal(b_packed, b.T)
        unsigned = a + 128
        got = unsigned @ b_packed.T - b_zero * unsigned.sum(axis=1, keepdims=True) + col_term
        assert np.array_equal(got, want), path
    # Against the plain packed term: a_zero + 128 for a_zero in both places it appears.
    plain = matmul.deployed_io(io, complete(space, {"vector": "avx512", "layout": "packed"})).buffers[2].data
    assert np.array_equal((col_term - plain) % (1 << 32), (-128 * b.sum(axis=0) + shape["k"] * 128 * b_zero) % (1 << 32))


@pytest.mark.parametrize("in_zero", [-128, 127])
def test_conv_packing_folds_the_offset_of_the_input_into_the_term(conv, host, in_zero, rng):
    target = with_units(host, "avx2", "avx512", *PATHS)
    shape = conv.parse_shape(CONV_SHAPES[1])
    io = conv.make_io(shape, rng, edge="extreme")
    io = KernelIO(buffers=io.buffers, params=tuple(dict(io.params, in_zero=in_zero).items()))
    rows = io.buffers[1].data.reshape(shape["cout"], -1).astype(np.int64)
    bias = io.buffers[2].data.astype(np.int64)
    patch = rng.integers(-128, 128, size=rows.shape[1])  # any reduction row of inputs
    for path in PATHS:
        deployed = conv.deployed_io(io, complete(conv.space(target, shape), {"vector": path}))
        packed, term = (buf.data.astype(np.int64) for buf in deployed.buffers[1:3])
        got = packed.reshape(rows.shape) @ (patch + 128) + term
        assert np.array_equal(got, rows @ (patch - in_zero) + bias), path


def pack_helper(source: str, function: str) -> str:
    """The plain-C <fn>_pack() prototype and definition out of a variant's source (after
    matmul's enum of its dimensions, which the helper reads)."""
    dims = [line for line in source.splitlines() if line.startswith("enum {") and line.endswith("};")]
    start = source.index(f"void {function}_pack(")
    return "\n".join(dims) + "\n" + source[start:source.index("\n}\n", start) + 3]


def build_pack(rendered, folder):
    folder.mkdir()
    (folder / "kernel.h").write_text(kernel_header(rendered.declaration))
    (folder / "kernel.c").write_text("#include <stdint.h>\n#include \"kernel.h\"\n"
                                     + pack_helper(rendered.source, rendered.function))
    subprocess.run(["cc", *COMMON_CFLAGS, "-O2", "-fPIC", "-shared", "-I", str(folder), "kernel.c", "-o", "k.so"],
                   cwd=folder, check=True)
    return getattr(ctypes.CDLL(str(folder / "k.so")), f"{rendered.function}_pack")


def pointer(array):
    return array.ctypes.data_as(ctypes.c_void_p)


@pytest.mark.parametrize("path", PATHS)
def test_exported_c_packing_helpers_match_numpy(matmul, conv, host, path, tmp_path, rng):
    """The exported <fn>_pack() of a VNNI variant (plain C: builds anywhere) computes the
    offset terms numpy's pack_weights gives the measured variant."""
    target = with_units(host, BASE_UNIT[path], path)
    shape = matmul.parse_shape("m=3,n=13,k=37")
    config = complete(matmul.space(target, shape), {"vector": path})
    pack = build_pack(matmul.render(target, shape, config), tmp_path / "matmul")
    for edge in ("random", "extreme"):
        io = matmul.make_io(shape, rng, edge=edge)
        b, bias = (np.ascontiguousarray(buf.data) for buf in io.buffers[1:3])
        p = dict(io.params)
        b_packed, col_term = np.zeros((shape["n"], shape["k"]), np.int8), np.zeros_like(bias)
        pack(pointer(b), pointer(bias), ctypes.c_int32(p["a_zero"]), ctypes.c_int32(p["b_zero"]),
             pointer(b_packed), pointer(col_term))
        deployed = matmul.deployed_io(io, config)
        assert np.array_equal(b_packed, deployed.buffers[1].data) and np.array_equal(col_term, deployed.buffers[2].data)
    cshape = conv.parse_shape(CONV_SHAPES[1])
    config = complete(conv.space(target, cshape), {"vector": path})
    pack = build_pack(conv.render(target, cshape, config), tmp_path / "conv")
    for edge in ("random", "extreme"):
        io = conv.make_io(cshape, rng, edge=edge)
        weights, bias = (np.ascontiguousarray(buf.data) for buf in io.buffers[1:3])
        packed, term = np.zeros_like(weights), np.zeros_like(bias)
        pack(pointer(weights), pointer(bias), ctypes.c_int32(dict(io.params)["in_zero"]), pointer(packed), pointer(term))
        deployed = conv.deployed_io(io, config)
        assert np.array_equal(packed, deployed.buffers[1].data) and np.array_equal(term, deployed.buffers[2].data)


# --- bit-exact on this machine -----------------------------------------------------------------------
def largest_and_smallest(configs, keys=("tile_m", "tile_n", "unroll_k")):
    """The configurations with the largest and the smallest tile (ties: the first)."""
    def size(config):
        product = 1
        for key in keys:
            product *= config[key]
        return product
    return [max(configs, key=size), min(configs, key=size)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.one_case
def test_matmul_is_exact_on_odd_shapes_with_extreme_zero_points(matmul, host, path, tmp_path):
    """K not a multiple of 4, 32 or 64 (the tails), N not a multiple of 8 or 16, every pair of
    extreme zero points, the largest and smallest tiles, both compilers."""
    if not runnable(host, path):
        assert path not in vectors(matmul, host, MATMUL_SHAPES[0])
        return
    for number, shape_text in enumerate(MATMUL_SHAPES):
        shape = matmul.parse_shape(shape_text)
        space = matmul.space(host, shape)
        for compiler in ("gcc", "clang"):
            configs = [c for c in space if c["vector"] == path and c["compiler"] == compiler]
            for index, config in enumerate(largest_and_smallest(configs)):
                a_zero, b_zero = EXTREMES[(number + 2 * index + (compiler == "clang")) % 4]
                base = matmul.make_io(shape, np.random.default_rng(number), edge=("random", "extreme")[index])
                io = KernelIO(buffers=base.buffers, params=tuple(dict(base.params, a_zero=a_zero, b_zero=b_zero).items()))
                trial = Evaluator(matmul, host, shape, space, io, tmp_path)(config)
                assert trial.outcome is Outcome.OK, f"{shape_text} {config.key()} {io.params}: {trial.error}"


@pytest.mark.parametrize("path", PATHS)
def test_a_bias_at_the_int32_limits_survives_the_offset_term(matmul, host, path, tmp_path):
    """Biases chosen so the true accumulators reach INT32_MAX and INT32_MIN exactly: the
    column term (bias - (a_zero + 128) * sum b + ...) wraps in int32 and the kernel's sums
    modulo 2^32 must undo it."""
    if not runnable(host, path):
        return
    shape = matmul.parse_shape("m=4,n=19,k=77")
    base = matmul.make_io(shape, np.random.default_rng(4), edge="extreme")
    a, b = (buf.data.astype(np.int64) for buf in base.buffers[:2])
    params = dict(base.params, a_zero=-128, b_zero=0)
    dot = (a + 128) @ b  # columns of either sign: a bias in int32 can push each to one limit
    to_max = np.where(np.arange(shape["n"]) % 2 == 0, dot.max(axis=0) >= 0, dot.min(axis=0) > 0)
    bias = np.where(to_max, (1 << 31) - 1 - dot.max(axis=0), -(1 << 31) - dot.min(axis=0))
    buffers = (base.buffers[0], base.buffers[1], Buffer("bias", bias.astype(np.int32), weight=True), base.buffers[3])
    io = KernelIO(buffers=buffers, params=tuple(params.items()))
    acc = dot + bias
    assert acc.max() == (1 << 31) - 1 and acc.min() == -(1 << 31)
    space = matmul.space(host, shape)
    for compiler in ("gcc", "clang"):
        config = complete(space, {"vector": path, "compiler": compiler, "tile_m": 2, "tile_n": 4})
        assert_ok(Evaluator(matmul, host, shape, space, io, tmp_path)(config))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.one_case
def test_conv_is_exact_per_channel_with_extreme_zero_points(conv, host, path, tmp_path):
    """Both algorithms, cin not a multiple of 4 or of the step, padded and unpadded layers,
    in_zero and out_zero at the int8 extremes (make_io's extreme edge: per-channel shifts,
    largest biases)."""
    if not runnable(host, path):
        assert path not in vectors(conv, host, CONV_SHAPES[0])
        return
    for number, shape_text in enumerate(CONV_SHAPES):
        shape = conv.parse_shape(shape_text)
        space = conv.space(host, shape)
        for algo in ("direct", "im2col"):
            configs = [c for c in space if c["vector"] == path and c["algo"] == algo]
            for index, config in enumerate(largest_and_smallest(configs, ("tile_p", "tile_oc"))):
                base = conv.make_io(shape, np.random.default_rng(number), edge="extreme")
                in_zero, out_zero = EXTREMES[(number + 2 * index + (algo == "im2col")) % 4]
                io = KernelIO(buffers=base.buffers,
                              params=tuple(dict(base.params, in_zero=in_zero, out_zero=out_zero).items()))
                trial = Evaluator(conv, host, shape, space, io, tmp_path)(config)
                assert trial.outcome is Outcome.OK, f"{shape_text} {config.key()} {io.params}: {trial.error}"


@pytest.mark.parametrize("path", PATHS)
def test_conv_equals_tflite_micro(conv, host, path, tmp_path):
    if not runnable(host, path):
        return
    rng = np.random.default_rng(19)
    for index, algo in enumerate(("direct", "im2col")):
        shape = draw_conv_shape(conv, rng)
        config = complete(conv.space(host, shape), {"vector": path, "algo": algo})
        assert_ok(run_against_tflm(conv, host, shape, config, tmp_path, rng, edge=("random", "extreme")[index]))


@pytest.mark.parametrize("path", PATHS)
def test_unaligned_buffers_without_undefined_behaviour(matmul, host, path, tmp_path, capfd):
    """The largest tile built with UBSan, every buffer one or three bytes off alignment."""
    if not runnable(host, path):
        return
    for shape_text in ("m=1,n=1,k=1", "m=3,n=17,k=63", "m=9,n=1,k=65"):
        shape = matmul.parse_shape(shape_text)
        config = largest_and_smallest([c for c in matmul.space(host, shape) if c["vector"] == path
                                       and c["compiler"] == "gcc"])[0]
        work = tmp_path / shape_text.replace(",", "_").replace("=", "")
        work.mkdir()
        function = build_shared(matmul, host, shape, config, work, ("-fsanitize=undefined",))
        for offset, edge in ((1, "extreme"), (3, "random")):
            io = matmul.make_io(shape, np.random.default_rng(offset), edge=edge)
            a, b, bias, c = (misaligned(buf.data, offset) for buf in matmul.deployed_io(io, config).buffers)
            function(*(pointer(x) for x in (a, b, bias, c)), *(ctypes.c_int32(v) for _, v in io.params))
            assert np.array_equal(c, matmul.reference(shape, io)[0]), f"{shape_text} {config.key()} offset {offset}"
    assert "runtime error" not in capfd.readouterr().err


@pytest.mark.parametrize("path, flag", [("avxvnni", "-mavxvnni"), ("avx512vnni", "-mavx512vnni")])
def test_source_refuses_a_build_without_the_isa(matmul, conv, host, path, flag, tmp_path):
    """With the VNNI extension switched off (a CPU without it), the variant names the flag."""
    target = with_units(host, BASE_UNIT[path], path)
    for kernel, shape_text in ((matmul, MATMUL_SHAPES[1]), (conv, CONV_SHAPES[0])):
        shape = kernel.parse_shape(shape_text)
        rendered = kernel.render(target, shape, complete(kernel.space(target, shape), {"vector": path}))
        (tmp_path / "kernel.h").write_text(kernel_header(rendered.declaration))
        (tmp_path / "kernel.c").write_text(rendered.source)
        off = "-mno-" + flag[2:]
        result = subprocess.run(["gcc", "-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl", off,
                                 *COMMON_CFLAGS, "-c", "kernel.c", "-I", str(tmp_path)],
                                cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode != 0 and f"compile with {flag}" in result.stderr, result.stderr[-400:]


# --- end to end through the CLI ----------------------------------------------------------------------
def cli(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("kernel_name, shape, values", [
    ("matmul_s8", "m=7,n=21,k=67", "tile_m={tm},tile_n=4,unroll_k=1,vector={path},layout=packed,compiler={cc},opt=O3"),
    ("conv2d_s8", "h=6,w=5,cin=19,cout=7,kh=3,kw=3,stride=1,pad=1,dilation=1",
     "algo=im2col,im2col_pixels=4,tile_p={tm},tile_oc=3,unroll=1,vector={path},weight_sums=in_loop,layout=packed,"
     "fusion=fused,compiler={cc},opt=O2"),
])
@pytest.mark.one_case
def test_tune_export_and_verify_on_the_host(host, tmp_path, kernel_name, shape, values):
    """`edgetune tune` measures the VNNI configurations given first (both paths, both
    compilers), `export` bakes the best, and `verify` finds it correct on fresh inputs."""
    paths = [p for p in PATHS if host.has_vector(p)]
    if not paths:
        return
    db = str(tmp_path / "t.db")
    initial = [values.format(path=p, cc=cc, tm=tm) for p in paths for cc, tm in (("gcc", 2), ("clang", 1))]
    cli("tune", kernel_name, "--target", "host", "--shape", shape, "--strategy", "random", "--budget",
        str(len(initial)), "--db", db, *[arg for v in initial for arg in ("--initial", v)], "--json")
    trials = [t for w in TuningDatabase(db).workloads() for t in TuningDatabase(db).trials(w)]
    measured = {(t.config["vector"], t.config["compiler"]): t.outcome for t in trials if t.config["vector"] in PATHS}
    assert measured == {(p, cc): Outcome.OK for p in paths for cc in ("gcc", "clang")}
    out = tmp_path / "export"
    cli("export", "--target", "host", "--db", db, "--out", str(out))
    # verify's speed check is not what this test is about: only a wrong result may fail it.
    sources = "".join(path.read_text() for path in out.glob("*.c"))
    assert any(f"vector={p}" in sources for p in paths)  # only VNNI variants were measured
    report = json.loads(cli("verify", str(out), "--tolerance", "100000", "--seed", "5", "--json"))
    assert report["ok"] and [k["ok"] for k in report["kernels"]] == [True], report
