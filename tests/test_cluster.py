"""Tuning through a Dask cluster: a local cluster of worker processes measures exactly what a
local run measures, a worker killed mid-run loses no trial, and bad cluster input is a
one-line error."""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.cluster import ClusterError, connect
from edgetune.codegen.kernels import KernelError
from edgetune.codegen.kernels.user_loader import digest_of_contents, kernel_of_bundle, load_kernel_file
from edgetune.session import RemoteEvaluation, TuneRequest, evaluate_remotely, machine_name, tune, workload_of
from edgetune.tuner import Outcome, TuningDatabase

pytestmark = pytest.mark.qemu
SHAPE = "m=6,n=12,k=16"


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    # Worker processes, like separate hosts: they import edgetune and build on their own.
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None) as local:
        yield local


def measured(db, kernel, target):
    workload = workload_of(kernel, target, kernel.parse_shape(SHAPE))
    return {t.config.key(): (t.outcome, t.values.get("instructions")) for t in db.trials(workload)}


def test_cluster_run_measures_what_a_local_run_measures_despite_a_killed_worker(cluster, matmul, m55, tmp_path):
    client, executor = connect(cluster.scheduler_address, m55)
    try:
        pids = client.run(os.getpid)  # worker address -> process id
        killed = []

        def kill_one_worker_mid_batch(done, budget, trial):
            # After the first finished trial of the run, two more are in flight: kill a worker.
            if not killed:
                victim = sorted(pids.values())[0]
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)

        shape = matmul.parse_shape(SHAPE)
        remote_db = TuningDatabase(tmp_path / "cluster.db")
        summary = tune(TuneRequest(matmul, m55, shape, "random", 9, 3, 7), remote_db, kill_one_worker_mid_batch,
                       executor=executor)
    finally:
        client.close()
    assert killed and summary.trials == 9 and summary.new_trials == 9  # nothing lost
    local_db = TuningDatabase(tmp_path / "local.db")
    tune(TuneRequest(matmul, m55, shape, "random", 9, 3, 7), local_db)
    remote, local = measured(remote_db, matmul, m55), measured(local_db, matmul, m55)
    assert set(remote) == set(local)
    for key, (outcome, count) in remote.items():
        if outcome is Outcome.RUNTIME_ERROR:  # Dask gave up on it: recorded as failed, not lost
            continue
        assert (outcome, count) == local[key]
    # Every trial a worker measured says which machine measured it, and when.
    stamped = [t for t in remote_db.trials(workload_of(matmul, m55, shape)) if t.measured_by is not None]
    assert stamped and all(t.measured_by == machine_name(m55) and t.measured_at for t in stamped)


@pytest.mark.smoke
def test_cli_tunes_through_the_cluster(cluster, tmp_path):
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", "cortex-m55", "--shape", SHAPE, "--budget", "4",
                                       "--jobs", "3", "--cluster", cluster.scheduler_address, "--db",
                                       str(tmp_path / "c.db"), "--json"])
    assert result.exit_code == 0, result.output
    assert '"trials": 4' in result.output


@pytest.mark.parametrize("address, target, culprit", [
    ("localhost:8786", "cortex-m55", "localhost:8786"),
    ("tcp://127.0.0.1:9", "cortex-m55", "cannot reach"),
    ("tcp://127.0.0.1:8786", "host", "host"),
])
def test_bad_cluster_input_is_one_line(address, target, culprit, tmp_path):
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--target", target, "--shape", "m=2,n=2,k=2",
                                       "--cluster", address, "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and culprit in lines[0], result.output


def test_connect_refuses_the_host_target(host):
    with pytest.raises(ClusterError, match="measures the machine"):
        connect("tcp://127.0.0.1:8786", host)


# --- a kernel of the user's own, shipped to the workers by content ------------------------
VECTOR_ADD = Path(__file__).resolve().parents[1] / "examples" / "kernels" / "vector_add"


def _copy_kernel(tmp_path):
    """A copy of examples/kernels/vector_add in a folder the workers cannot know about."""
    folder = tmp_path / "private" / "vector_add"
    shutil.copytree(VECTOR_ADD, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def test_a_kernel_file_tunes_through_the_cluster_as_it_tunes_locally(cluster, m55, tmp_path):
    folder = _copy_kernel(tmp_path)
    args = ["--kernel-file", str(folder), "--target", "cortex-m55", "--shape", "size=48", "--budget", "4",
            "--strategy", "random", "--seed", "3", "--json"]
    remote = CliRunner().invoke(main, ["tune", *args, "--jobs", "2", "--cluster", cluster.scheduler_address,
                                       "--db", str(tmp_path / "c.db")])
    assert remote.exit_code == 0, remote.output
    local = CliRunner().invoke(main, ["tune", *args, "--db", str(tmp_path / "l.db")])
    assert local.exit_code == 0, local.output
    kernel = load_kernel_file(folder)
    workload = workload_of(kernel, m55, kernel.parse_shape("size=48"))
    got = {t.config.key(): (t.outcome, t.values.get("instructions")) for t in TuningDatabase(tmp_path / "c.db").trials(workload)}
    want = {t.config.key(): (t.outcome, t.values.get("instructions")) for t in TuningDatabase(tmp_path / "l.db").trials(workload)}
    assert len(got) == 4 and got == want
    assert all(outcome is Outcome.OK for outcome, _ in got.values())
    # Measured on the workers (stamped with the worker's machine), not on this process.
    assert all(t.measured_by == machine_name(m55) for t in TuningDatabase(tmp_path / "c.db").trials(workload))


def test_a_worker_refuses_a_kernel_whose_files_do_not_hash_to_its_definition(cluster, m55, tmp_path):
    kernel = load_kernel_file(_copy_kernel(tmp_path))
    bundle = kernel.bundle
    assert bundle is not None and {name for name, _ in bundle.files} == {"kernel.py", "vector_add.c"}
    edited = tuple((name, data + b"\n/* edited */\n" if name.endswith(".c") else data) for name, data in bundle.files)
    forged = dataclasses.replace(bundle, files=edited)
    shape = kernel.parse_shape("size=48")
    config = kernel.tuning_space(m55, shape).config_at(0)
    from distributed import Client

    client = Client(cluster.scheduler_address)
    try:
        honest = client.submit(evaluate_remotely, RemoteEvaluation(kernel.name, m55, tuple(shape.items()), bundle),
                               config, pure=False).result()
        refused = client.submit(evaluate_remotely, RemoteEvaluation(kernel.name, m55, tuple(shape.items()), forged),
                                config, pure=False)
        with pytest.raises(KernelError, match="hashes to .* not " + kernel.definition[:12]):
            refused.result()
    finally:
        client.close()
    assert honest.outcome is Outcome.OK


def test_a_bundle_cannot_write_outside_its_private_folder(tmp_path):
    bundle = load_kernel_file(_copy_kernel(tmp_path)).bundle
    for name in ("../escape.py", "/etc/x", "a/../../b"):
        files = ((name, b"x"), *bundle.files)
        bad = dataclasses.replace(bundle, definition=digest_of_contents(files), files=files)
        with pytest.raises(KernelError, match="not a path inside its folder"):
            kernel_of_bundle(bad)
