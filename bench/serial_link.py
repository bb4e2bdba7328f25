"""The serial protocol over QEMU's emulated UART (target an547-serial), measured in one run:

- round trip of a HELLO (13-byte request, 44-byte reply), with `nodelay=on` as shipped and, as the
  reference, without it (Nagle's algorithm on QEMU's side of the socket);
- LOAD and READ throughput in max-payload chunks;
- one trial's run step (flash = start QEMU, connect, HELLO, LOAD, RUN, READ, CYCLES) against
  the semihosting QEMU runner's run step for the same image workload (cortex-m55: inputs
  preloaded by QEMU's loader device, outputs through semihosting).

usage: .venv/bin/python bench/serial_link.py [--hellos 200] [--kbytes 64] [--trials 5]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from edgetune.codegen import get_kernel
from edgetune.hal import load_target
from edgetune.targets import get_target, target_file
from edgetune.targets import iobuf
from edgetune.targets.runners import runner_for

CONFIG = {"tile_m": 4, "tile_n": 8, "unroll_k": 2, "vector": "mve", "compiler": "gcc", "opt": "O2"}


def build(target, kernel, shape, io, folder: Path):
    runner = runner_for(target)
    space = kernel.space(target, shape)
    workdir = Path(tempfile.mkdtemp(dir=folder))
    return runner, runner.build(kernel, shape, io, kernel.render(target, shape, space.make(CONFIG)), workdir)


def round_trips(runner, built, count: int) -> list[float]:
    board = runner._start_board(built)
    try:
        board.link.hello()
        times = []
        for _ in range(count):
            start = time.perf_counter()
            board.link.hello()
            times.append(time.perf_counter() - start)
        return times
    finally:
        board.stop()


def throughput(runner, built, nbytes: int) -> tuple[float, float]:
    board = runner._start_board(built)
    try:
        board.link.hello()
        data = bytes(np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8))
        start = time.perf_counter()
        board.link.load(data)
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        back = board.link.read(0, nbytes)
        read_s = time.perf_counter() - start
        assert back == data, "READ returned other bytes than LOAD stored"
        return nbytes / load_s, nbytes / read_s
    finally:
        board.stop()


def run_step(runner, built, io, trials: int) -> list[float]:
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        runner.run(built, io)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hellos", type=int, default=200)
    parser.add_argument("--kbytes", type=int, default=64)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()

    kernel = get_kernel("matmul_s8")
    shape = kernel.parse_shape("m=32,n=32,k=64")
    io = kernel.make_io(shape, np.random.default_rng(1))
    serial_target = get_target("an547-serial")
    flash = [arg.replace(",nodelay=on", "") for arg in serial_target.serial.flash]
    nagle_target = load_target(target_file("an547-serial"), overrides={"name": "an547-nagle",
                                                                       "serial": {"flash": flash}})
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        serial_runner, serial_built = build(serial_target, kernel, shape, io, folder)
        nagle_runner, nagle_built = build(nagle_target, kernel, shape, io, folder)
        qemu_runner, qemu_built = build(get_target("cortex-m55"), kernel, shape, io, folder)

        fast = round_trips(serial_runner, serial_built, args.hellos)
        slow = round_trips(nagle_runner, nagle_built, max(10, args.hellos // 10))
        load_bps, read_bps = throughput(serial_runner, serial_built, args.kbytes * 1024)
        serial_runs = run_step(serial_runner, serial_built, io, args.trials)
        qemu_runs = run_step(qemu_runner, qemu_built, io, args.trials)

    block = len(iobuf.pack(io))
    ms = lambda values: statistics.median(values) * 1e3  # noqa: E731
    print(f"HELLO round trip, nodelay=on  : median {ms(fast):7.2f} ms  "
          f"p90 {sorted(fast)[int(0.9 * len(fast))] * 1e3:7.2f} ms  ({len(fast)} round trips)")
    print(f"HELLO round trip, Nagle (ref) : median {ms(slow):7.2f} ms  ({len(slow)} round trips)  "
          f"ratio {ms(slow) / ms(fast):5.1f}x slower")
    print(f"LOAD  {args.kbytes} KiB in 1020-byte chunks : {load_bps / 1024:6.1f} KiB/s")
    print(f"READ  {args.kbytes} KiB in 1020-byte chunks : {read_bps / 1024:6.1f} KiB/s")
    print(f"run step of one trial, matmul_s8 m=32,n=32,k=64 (I/O block {block} bytes), median of {args.trials}:")
    print(f"  serial (an547-serial)        : {ms(serial_runs):7.1f} ms")
    print(f"  semihosting + loader (ref)   : {ms(qemu_runs):7.1f} ms   ratio {ms(serial_runs) / ms(qemu_runs):4.2f}x")


if __name__ == "__main__":
    main()
