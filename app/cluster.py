"""Connecting to a Dask cluster (`edgetune tune ... --cluster tcp://HOST:PORT`).

The coordinator (the process running `edgetune tune`) asks the strategy, sends each
configuration to the cluster (edgetune.session.evaluate_remotely) and alone writes the
database. Workers need edgetune and the target's toolchain installed; see docs/cluster.md.

Boards: a target whose runner names a `resource` (e.g. one physical board) only runs on
workers started with that resource (`dask worker ... --resources "board-xyz=1"`), one run
at a time. If a worker dies mid-trial, Dask reschedules the trial on another worker; a trial
that still cannot complete is recorded as a failed trial, never lost.
"""
from __future__ import annotations

import re
import socket

from edgetune.errors import EdgetuneError
from edgetune.hal import Target
from edgetune.targets.runners import runner_class

ADDRESS_RE = re.compile(r"(tcp|tls)://[A-Za-z0-9.\-\[\]:]+:\d{1,5}")


class ClusterError(EdgetuneError, ValueError):
    """The cluster address is malformed or unreachable, or the target cannot run there."""


def connect(address: str, target: Target):
    """(client, executor): a concurrent.futures executor running on the cluster at `address`.
    Close the client when done."""
    if runner_class(target).measures_this_machine:
        raise ClusterError(f"target {target.name} measures the machine edgetune runs on; "
                           "--cluster is for emulated targets and boards")
    if not ADDRESS_RE.fullmatch(address):  # fullmatch: `$` would let a trailing newline in
        raise ClusterError(f"--cluster {address!r}: expected a scheduler address such as tcp://HOST:8786")
    try:
        from distributed import Client  # imported here: only cluster runs pay for it
    except ModuleNotFoundError as exc:
        if exc.name != "distributed":  # installed but broken: a real error, shown as one
            raise
        raise ClusterError("--cluster needs Dask's distributed package: pip install 'edgetune[cluster]'") from None

    try:
        _probe(address)
        client = Client(address, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise ClusterError(f"--cluster {address}: cannot reach the scheduler ({exc})") from None
    resource = target.runner.resource
    return client, client.get_executor(resources={resource: 1} if resource else None, pure=False)


def _probe(address: str, timeout_s: float = 10.0) -> None:
    """Open and close one TCP connection to the scheduler, raising OSError when none listens.
    Dask's Client retries a refused connection until its timeout; a wrong port or a scheduler
    not started is then ten silent seconds. The plain socket is refused at once."""
    host, _, port = address.split("://", 1)[1].rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
        pass
