"""Losing the machine under a trial: an emulator killed from outside mid-run, a serial board
whose link goes away. Each is recorded as a failed trial of its own kind (emulator_lost,
device_lost), distinct from the kernel crashing, and the tuning run finishes its budget."""
from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from edgetune.hal import load_target
from edgetune.evaluate import Evaluator
from edgetune.session import TuneRequest, tune
from edgetune.targets import target_file
from edgetune.targets.toolchain import killed_from_outside
from edgetune.tuner import Outcome, TuningDatabase

from allowed_tools import allowing
from serial_fixtures import PROXY, QEMU, SHIPPED

pytestmark = pytest.mark.qemu

# qemu-system-arm, except that the runs numbered in KILL (1, 2, ... counted in RUNS; --version
# calls are not runs) are killed mid-run by another process with SIGNAL: the script forks a
# killer that waits until this process has become QEMU, then signals it. The runner's child
# is QEMU itself, killed from outside, as the OOM killer or a user would.
KILLER = '''#!{python}
import os, signal, sys, time
args = ["qemu-system-arm", *sys.argv[1:]]
if "-kernel" in args:
    n = 1
    while True:
        try:
            os.close(os.open(os.path.join({runs!r}, str(n)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            break
        except FileExistsError:
            n += 1
    if n in {kill!r}:
        qemu = os.getpid()
        if os.fork() == 0:
            os.closerange(0, 1024)  # hold none of the runner's pipes open
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    if os.readlink(f"/proc/{{qemu}}/exe").endswith("qemu-system-arm"):
                        break
                except OSError:
                    pass
                time.sleep(0.001)
            os.kill(qemu, {signal})
            os._exit(0)
os.execvp(args[0], args)
'''


def killing_m55(tmp_path: Path, kill: set[int], signum: int = signal.SIGKILL):
    runs = tmp_path / "runs"
    runs.mkdir()
    (tmp_path / "killer").mkdir()
    wrapper = tmp_path / "killer" / "qemu-system-arm"  # named for its job, allowed by its path
    wrapper.write_text(KILLER.format(python=sys.executable, runs=str(runs), kill=kill, signal=int(signum)))
    wrapper.chmod(0o755)
    with allowing(wrapper):
        return load_target(target_file("cortex-m55"), overrides={"runner": {"program": str(wrapper)}})


def test_only_signals_from_outside_count_as_lost():
    assert killed_from_outside(-signal.SIGKILL) and killed_from_outside(-signal.SIGTERM)
    assert not killed_from_outside(-signal.SIGSEGV) and not killed_from_outside(-signal.SIGABRT)
    assert not killed_from_outside(0) and not killed_from_outside(5) and not killed_from_outside(None)


def test_qemu_killed_mid_run_is_emulator_lost_and_tuning_goes_on(matmul, tmp_path):
    target = killing_m55(tmp_path, kill={2})
    db = TuningDatabase(tmp_path / "t.db")
    # One variant per emulator run, so the killed run is one trial's (batched, see below).
    summary = tune(TuneRequest(matmul, target, matmul.parse_shape("m=4,n=4,k=8"), budget=4, seed=5, batch=1), db)
    assert summary.trials == 4 and summary.stopped == "budget"
    assert summary.failures == {"emulator_lost": 1}
    trials = db.trials(summary.workload)
    (lost,) = [t for t in trials if t.outcome.failed]
    assert "killed by signal 9 (SIGKILL)" in lost.error
    assert sum(t.outcome is Outcome.OK for t in trials) == 3


def test_an_emulator_killed_mid_batch_costs_no_trial_its_outcome(matmul, tmp_path):
    """Batched, the variant running when its image's emulator was killed is measured again
    alone at once, and the variants after it in the next image: every trial is measured."""
    target = killing_m55(tmp_path, kill={1})  # the first image's emulator
    db = TuningDatabase(tmp_path / "t.db")
    summary = tune(TuneRequest(matmul, target, matmul.parse_shape("m=4,n=4,k=8"), budget=6, seed=5, batch=3), db)
    assert summary.trials == 6 and summary.failures == {}
    runs = len(list((tmp_path / "runs").iterdir()))
    assert runs > 2  # two images, plus what the killed one left over (alone, then the next image)


def test_a_resumed_run_measures_lost_trials_again_and_keeps_the_rest(matmul, tmp_path):
    shape = matmul.parse_shape("m=4,n=4,k=8")
    db = TuningDatabase(tmp_path / "t.db")
    target = killing_m55(tmp_path, kill={1})  # only the first run of the emulator is killed
    first = tune(TuneRequest(matmul, target, shape, budget=3, seed=5, batch=1), db)
    assert first.failures == {"emulator_lost": 1}
    before = {t.config: t for t in db.trials(first.workload)}
    (lost,) = [config for config, t in before.items() if t.outcome.lost]
    # Resumed, the emulator survives: only the lost configuration is measured (again).
    again = tune(TuneRequest(matmul, target, shape, budget=3, seed=5, batch=1), db)
    assert again.workload == first.workload
    assert again.new_trials == 1 and again.trials == 3 and again.failures == {}
    after = {t.config: t for t in db.trials(first.workload)}
    assert after.keys() == before.keys() and after[lost].outcome is Outcome.OK
    assert all(after[c].values == before[c].values for c in before if c != lost)
    # A lost trial never replaces a measured one (e.g. an import of an older, lost result).
    assert not db.record(first.workload, before[lost], "random", 5)
    assert {t.config: t.outcome for t in db.trials(first.workload)}[lost] is Outcome.OK


@pytest.mark.parametrize("signum, outcome", [(signal.SIGTERM, Outcome.EMULATOR_LOST), (signal.SIGSEGV, Outcome.CRASH)])
def test_qemu_ended_by_a_signal_is_lost_or_crashed_by_the_signal(matmul, tmp_path, signum, outcome):
    # SIGSEGV: QEMU itself crashed, which only what the guest ran can cause; SIGTERM came from outside.
    target = killing_m55(tmp_path, kill={1}, signum=signum)
    shape = matmul.parse_shape("m=4,n=4,k=8")
    space = matmul.space(target, shape)
    config = space.make({"tile_m": 1, "tile_n": 4, "unroll_k": 1, "vector": "c", "layout": "rowmajor",
                         "compiler": "gcc", "opt": "O2"})
    trial = Evaluator(matmul, target, shape, space, matmul.make_io(shape, np.random.default_rng(1)), tmp_path)(config)
    assert trial.outcome is outcome, trial.error
    assert f"signal {int(signum)}" in trial.error


def board_in_trouble(tmp_path: Path, mode: str, launches: str):
    """an547-serial behind tests/uart_proxy.py, with `mode` trouble on the numbered launches."""
    (tmp_path / "launches").mkdir()
    flash = [sys.executable, str(PROXY), "--listen", "{port}", "--mode", mode,
             "--launch-dir", str(tmp_path / "launches"), "--trouble-on", launches, "--", *QEMU]
    path = tmp_path / "board.toml"
    # Both kinds of trouble end in a closed link, seen at once: the reply timeout only has to
    # outlast a board that is slow because the machine is loaded (1 s was not always enough).
    path.write_text(f'extends = "{SHIPPED}"\nname = "an547-{mode}"\n[runner]\ntimeout_s = 10\n'
                    f"[serial]\nflash = {json.dumps(flash)}\nreply_timeout_s = 5.0\nretries = 0\n")
    with allowing(sys.executable, PROXY, tmp_path / "launches"):  # every path a flash command passes is allowed
        return load_target(path)


def test_a_board_disconnected_mid_run_is_device_lost_and_tuning_goes_on(matmul, tmp_path):
    target = board_in_trouble(tmp_path, "die", "2")
    db = TuningDatabase(tmp_path / "t.db")
    # One variant per flash, so the lost board is one trial's.
    summary = tune(TuneRequest(matmul, target, matmul.parse_shape("m=4,n=4,k=8"), budget=3, seed=2, batch=1), db)
    assert summary.trials == 3 and summary.stopped == "budget"
    trials = db.trials(summary.workload)
    assert summary.failures == {"device_lost": 1}, [t.error for t in trials if t.outcome.failed]
    (lost,) = [t for t in trials if t.outcome.failed]
    assert "closed" in lost.error
    assert sum(t.outcome is Outcome.OK for t in trials) == 2


def test_an_emulated_board_killed_from_outside_is_emulator_lost(matmul, tmp_path):
    target = board_in_trouble(tmp_path, "kill", "1")
    shape = matmul.parse_shape("m=4,n=4,k=8")
    space = matmul.space(target, shape)
    config = space.make({"tile_m": 2, "tile_n": 4, "unroll_k": 1, "vector": "c", "layout": "rowmajor",
                         "compiler": "gcc", "opt": "O2"})
    trial = Evaluator(matmul, target, shape, space, matmul.make_io(shape, np.random.default_rng(1)), tmp_path)(config)
    assert trial.outcome is Outcome.EMULATOR_LOST, trial.error
    assert "killed by signal 9" in trial.error


def test_lost_kinds_are_stored_exported_counted_and_shown(tmp_path):
    import io

    from edgetune.progress import ProgressDisplay
    from edgetune.session import summarize
    from edgetune.tuner import Config, Trial, Workload

    workload = Workload("matmul_s8", 2, "cortex-m55", (("m", 4),), "t")
    trials = [Trial(Config((("tile_m", 1),)), Outcome.EMULATOR_LOST, error="QEMU was killed by signal 9"),
              Trial(Config((("tile_m", 2),)), Outcome.DEVICE_LOST, error="the port closed"),
              Trial(Config((("tile_m", 4),)), Outcome.OK, values={"instructions": 10})]
    db = TuningDatabase(tmp_path / "a.db")
    out = io.StringIO()
    show = ProgressDisplay("instructions", stream=out)
    for n, trial in enumerate(trials, 1):
        assert db.record(workload, trial, "random", 0)
        show(n, 3, trial)
    assert "device_lost 1, emulator_lost 1" in out.getvalue()
    lines = io.StringIO()
    db.export_jsonl(lines)
    copy = TuningDatabase(tmp_path / "b.db")
    assert copy.import_jsonl(lines.getvalue().splitlines()).added == 3
    summary = summarize(copy, workload, "instructions")
    assert summary.failures == {"emulator_lost": 1, "device_lost": 1} and summary.failed == 2
    assert [t.outcome for t in copy.trials(workload)] == [t.outcome for t in trials]


def test_a_port_that_vanishes_under_a_trial_is_device_lost_one_absent_before_stops(tmp_path, monkeypatch):
    from edgetune.targets.seriallink import LinkClosed
    from edgetune.targets.serialboard import PortUnavailable, SerialRunner, _Board
    from edgetune.targets.toolchain import BuildResult, MeasureError

    runner = SerialRunner(load_target(target_file("an547-serial"), overrides={"serial": {"retries": 1}}))
    build = BuildResult(path=tmp_path / "image.elf", workdir=tmp_path)
    gone = PortUnavailable("serial port /dev/ttyACM9 is absent: no such device (is the board connected?)")

    def closing_link(*_args):
        raise LinkClosed("/dev/ttyACM9: the port closed ([Errno 5] Input/output error)")

    monkeypatch.setattr(runner, "_measure", closing_link)
    boards = iter([_Board("/dev/ttyACM9", None, None)])

    def flash_once(_build):  # the first attempt reaches the board; the retry finds no port
        board = next(boards, None)
        if board is None:
            raise gone
        return board

    monkeypatch.setattr(runner, "_start_board", flash_once)
    with pytest.raises(MeasureError) as err:
        runner.run(build, io=None)
    assert err.value.outcome is Outcome.DEVICE_LOST
    assert "the port closed" in err.value.message and "is absent" in err.value.message

    def absent(_build):
        raise gone

    monkeypatch.setattr(runner, "_start_board", absent)
    with pytest.raises(PortUnavailable):  # gone before the trial began: the session stops, naming the port
        runner.run(build, io=None)
