"""The serial board path end to end: the serial harness in QEMU's AN547, its UART on a
loopback socket, the same host code as for a real board; and every kind of line trouble
(garbage, a silent board, a reset, a lost link, a hang, a fault) ending in a retried trial
or a classified failed one, never a hang or a lost record."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.hal import load_target
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, tune
from edgetune.targets import get_target
from edgetune.tuner import Outcome, TuningDatabase
from allowed_tools import allowing

from faulty import FaultyMatmul
from serial_fixtures import PROXY, QEMU, SHIPPED

pytestmark = pytest.mark.qemu

CONFIG = {"tile_m": 2, "tile_n": 4, "unroll_k": 1, "vector": "c", "layout": "rowmajor", "compiler": "gcc", "opt": "O2"}


def troubled_board(tmp_path_factory, mode: str, once: bool = True, reply_timeout_s: float = 1.0,
                   run_timeout_s: float = 4, retries: int = 2):
    """an547-serial behind tests/uart_proxy.py, which injects `mode` trouble."""
    folder = tmp_path_factory.mktemp(f"board-{mode}")
    flash = [sys.executable, str(PROXY), "--listen", "{port}", "--mode", mode]
    if once:
        flash += ["--once-file", str(folder / "once")]
    flash += ["--", *QEMU]
    path = folder / "board.toml"
    path.write_text(f'extends = "{SHIPPED}"\nname = "an547-{mode}"\n[runner]\ntimeout_s = {run_timeout_s}\n'
                    f"[serial]\nflash = {json.dumps(flash)}\nreply_timeout_s = {reply_timeout_s}\n"
                    f"retries = {retries}\n")
    with allowing(sys.executable, PROXY, folder / "once"):  # every path a flash command passes is allowed
        return load_target(path)


def quick_board(tmp_path_factory):
    folder = tmp_path_factory.mktemp("board-quick")
    path = folder / "board.toml"
    path.write_text(f'extends = "{SHIPPED}"\nname = "an547-quick"\n[runner]\ntimeout_s = 3\n'
                    "[serial]\nreply_timeout_s = 1.0\nretries = 1\n")
    return load_target(path)


def evaluate(kernel, target, tmp_path, config=CONFIG, shape_text="m=4,n=4,k=8", seed=7):
    shape = kernel.parse_shape(shape_text)
    space = kernel.space(target, shape)
    io = kernel.make_io(shape, np.random.default_rng(seed))
    return Evaluator(kernel, target, shape, space, io, tmp_path)(space.make(config))


def test_tune_through_the_serial_runner(tmp_path):
    db = tmp_path / "serial.db"
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", "an547-serial", "--shape", "m=8,n=8,k=16",
                                       "--budget", "3", "--jobs", "2", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["trials"] == 3 and summary["target"] == "an547-serial"
    assert summary["best"]["cycles"] > 0
    trials = TuningDatabase(db).trials(next(iter(TuningDatabase(db).workloads())))
    ok = [t for t in trials if t.outcome is Outcome.OK]
    assert ok, [t.error for t in trials]  # an OK trial's outputs matched numpy bit for bit
    for trial in ok:
        # QEMU has no DWT cycle counter: the record says SysTick counted, and nothing else.
        assert "dwt_cycles" not in trial.values
        assert trial.values["cycles"] == trial.values["systick_cycles"]


@pytest.mark.smoke
def test_serial_counts_are_repeatable_and_track_instructions(matmul, m55, tmp_path):
    config = {**CONFIG, "vector": "mve", "compiler": "clang", "tile_n": 8}
    serial = get_target("an547-serial")
    first = evaluate(matmul, serial, tmp_path, config, "m=8,n=16,k=16")
    second = evaluate(matmul, serial, tmp_path, config, "m=8,n=16,k=16")
    counted = evaluate(matmul, m55, tmp_path, config, "m=8,n=16,k=16")
    assert first.outcome is Outcome.OK, first.error
    assert first.values["cycles"] == second.values["cycles"]
    # -icount shift=5 at 32 MHz: 1.024 SysTick ticks per instruction (docs/measurements.md),
    # plus the glue call that the plugin's markers leave out.
    ratio = first.values["cycles"] / counted.values["instructions"]
    assert 1.0 < ratio < 1.06, ratio


def test_garbage_before_and_inside_frames_is_survived(matmul, tmp_path, tmp_path_factory):
    trial = evaluate(matmul, troubled_board(tmp_path_factory, "garbage"), tmp_path)
    assert trial.outcome is Outcome.OK, trial.error
    assert trial.values["serial_retransmissions"] >= 1  # the board-bound noise cost a retry
    assert trial.values["serial_attempts"] == 1


def test_a_board_that_stops_answering_is_a_timeout(matmul, tmp_path, tmp_path_factory):
    target = troubled_board(tmp_path_factory, "mute", once=False, retries=1)
    started = time.monotonic()
    trial = evaluate(matmul, target, tmp_path)
    assert trial.outcome is Outcome.TIMEOUT, trial.error
    assert "stopped answering" in trial.error
    assert time.monotonic() - started < 60  # bounded, however the retries went


def test_a_hanging_kernel_is_a_timeout(tmp_path, tmp_path_factory):
    trial = evaluate(FaultyMatmul("hang"), quick_board(tmp_path_factory), tmp_path)
    assert trial.outcome is Outcome.TIMEOUT, trial.error
    assert "it hangs" in trial.error


def test_a_faulting_kernel_is_a_crash_reported_by_the_board(tmp_path, tmp_path_factory):
    trial = evaluate(FaultyMatmul("bad_store"), quick_board(tmp_path_factory), tmp_path)
    assert trial.outcome is Outcome.CRASH, trial.error
    assert "faulted (exception 3)" in trial.error  # HardFault (a BusFault escalates when not enabled)


def test_a_wrong_answer_over_serial_is_caught(tmp_path, tmp_path_factory):
    trial = evaluate(FaultyMatmul("zeros"), quick_board(tmp_path_factory), tmp_path)
    assert trial.outcome is Outcome.WRONG_ANSWER, trial.error


def test_a_reset_mid_run_is_measured_again(matmul, tmp_path, tmp_path_factory):
    trial = evaluate(matmul, troubled_board(tmp_path_factory, "reset"), tmp_path)
    assert trial.outcome is Outcome.OK, trial.error
    assert trial.values["serial_resets"] == 1


def test_a_lost_link_mid_run_flashes_again(matmul, tmp_path, tmp_path_factory):
    trial = evaluate(matmul, troubled_board(tmp_path_factory, "die"), tmp_path)
    assert trial.outcome is Outcome.OK, trial.error
    assert trial.values["serial_attempts"] == 2


def test_a_link_lost_every_time_is_a_recorded_failed_trial(matmul, tmp_path, tmp_path_factory):
    target = troubled_board(tmp_path_factory, "die", once=False, retries=1)
    db = TuningDatabase(tmp_path / "t.db")
    shape = matmul.parse_shape("m=4,n=4,k=8")
    summary = tune(TuneRequest(matmul, target, shape, budget=1, seed=3), db)
    assert summary.trials == 1 and summary.failures == {"device_lost": 1}
    (trial,) = db.trials(summary.workload)
    assert "2 attempts" in trial.error and "closed" in trial.error


def test_a_board_that_does_not_start_is_a_failed_trial_naming_why(matmul, tmp_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("board-nostart")
    flash = [arg.replace("mps3-an547", "no-such-board") for arg in get_target("an547-serial").serial.flash]
    path = folder / "board.toml"
    path.write_text(f'extends = "{SHIPPED}"\nname = "an547-nostart"\n[serial]\nflash = {json.dumps(flash)}\n'
                    "retries = 0\n")
    trial = evaluate(matmul, load_target(path), tmp_path)
    assert trial.outcome is Outcome.RUNTIME_ERROR
    assert "the board did not start" in trial.error and "qemu-system-arm exited with status 1" in trial.error


def test_the_real_board_flow_flash_exits_then_the_port_is_opened(matmul, tmp_path, tmp_path_factory):
    # A real board's shape: the flash command finishes, the board keeps running the image,
    # and edgetune opens a fixed port. Here the "flasher" is QEMU daemonizing itself with
    # UART0 on a fixed loopback port (wait=off: the firmware polls its UART until spoken to).
    from edgetune.targets.serialboard import free_loopback_port

    folder = tmp_path_factory.mktemp("board-fixed")
    port = free_loopback_port()
    # No -pidfile: a target file may not make QEMU write a file (hal/flash_args.py); the
    # daemon is found by its one loopback port instead.
    serial = f"tcp:127.0.0.1:{port},server=on,wait=off,nodelay=on"
    flash = ["qemu-system-arm", "-M", "mps3-an547", "-display", "none", "-monitor", "none", "-icount", "shift=5",
             "-serial", serial, "-daemonize", "-kernel", "{image}"]
    path = folder / "board.toml"
    path.write_text(f'extends = "{SHIPPED}"\nname = "an547-fixed"\n[serial]\nflash = {json.dumps(flash)}\n'
                    f'port = "socket://127.0.0.1:{port}"\nflash_keeps_running = false\nretries = 0\n')
    try:
        trial = evaluate(matmul, load_target(path), tmp_path)
    finally:
        subprocess.run(["pkill", "-KILL", "-f", serial], check=False)
    assert trial.outcome is Outcome.OK, trial.error
    assert trial.values["systick_cycles"] > 0 and trial.values["serial_attempts"] == 1


def test_verify_on_a_serial_board_defaults_to_the_manifest_target_and_a_known_tolerance(tmp_path):
    """verify once read its tolerance from a table without serial boards (KeyError) and
    defaulted --target to cortex-m55 whatever the manifest named."""
    db, out = tmp_path / "serial.db", tmp_path / "export"
    runner = CliRunner()
    result = runner.invoke(main, ["tune", "matmul_s8", "--target", "an547-serial", "--shape", "m=4,n=4,k=8",
                                  "--budget", "2", "--db", str(db)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["export", "--target", "an547-serial", "--out", str(out), "--db", str(db)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["verify", str(out), "--json"])  # no --target: the manifest's
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    # The board here is QEMU (the flash command keeps running): its counts are exact.
    assert report["target"] == "an547-serial" and report["tolerance_pct"] == 0
    assert [k["measured"] == k["recorded"] > 0 for k in report["kernels"]] == [True]
    result = runner.invoke(main, ["verify", str(out), "--target", "cortex-m55"])
    assert result.exit_code == 2
    assert "'an547-serial'" in result.output and "'cortex-m55'" in result.output and "Traceback" not in result.output
