"""Tuning through a Dask cluster: a local cluster of worker processes measures exactly what a
local run measures, a worker killed mid-run loses no trial, and bad cluster input is a
one-line error."""
from __future__ import annotations

import os
import signal

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.cluster import ClusterError, connect
from edgetune.session import TuneRequest, machine_name, tune, workload_of
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
