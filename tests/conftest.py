"""Shared fixtures. Tests that need QEMU and the cross compilers do not skip: the README's
test command installs them, so their absence is a failure worth seeing."""
from __future__ import annotations

import os
import signal
import tempfile
from collections import Counter

import numpy as np
import pytest

from edgetune.codegen import get_kernel
from edgetune.hal import load_target
from edgetune.targets import get_target, target_file


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    # Compiled harness objects and the QEMU plugin go to a per-session cache, so tests
    # exercise the first-use build too and never depend on a developer's ~/.cache.
    os.environ["EDGETUNE_CACHE"] = str(tmp_path_factory.mktemp("edgetune-cache"))


@pytest.fixture(scope="session", autouse=True)
def _working_directories(tmp_path_factory):
    """The folder each test's own working directory is made in (one per xdist worker)."""
    root = tmp_path_factory.mktemp("cwd")
    before = os.getcwd()
    os.chdir(root)  # module fixtures too write nothing relative into the repository
    yield root
    os.chdir(before)


@pytest.fixture(autouse=True)
def _own_working_directory(_working_directories, monkeypatch):
    """Each test runs in an empty folder of its own: what a command writes where it is run
    (`edgetune.db` by default, an export's `out`) lands neither in the repository nor beside
    another test's, whichever worker runs it and in whatever order."""
    monkeypatch.chdir(tempfile.mkdtemp(dir=_working_directories))


@pytest.fixture(autouse=True)
def _no_kernels_of_your_own_across_tests():
    """Kernels of your own registered by a test (loading a --kernel-file registers one) are
    gone after it, as in a new process: no other test sees them, whichever worker runs it
    next (KERNELS is a registry of the process)."""
    from edgetune.codegen.kernels import KERNELS, SHIPPED, unregister_kernel
    yield
    for name in set(KERNELS) - SHIPPED:
        unregister_kernel(name)


@pytest.fixture
def sigint_as_at_a_terminal():
    """SIGINT handled as in a terminal's foreground job, whatever the suite was started under.
    A parent that ignores SIGINT (`nohup ... &`, a CI runner) hands the ignoring down through
    pytest and its xdist workers to every program a test starts: Python then installs no
    KeyboardInterrupt handler and a shell cannot even trap the signal. A handled signal is
    reset to the default in exec'd programs, so a test that sends Ctrl-C reaches them."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session")
def m55():
    return get_target("cortex-m55")


@pytest.fixture(scope="session")
def m55_quick():
    """cortex-m55 with a 3 s run timeout, for tests that provoke hangs."""
    return load_target(target_file("cortex-m55"), overrides={"runner": {"timeout_s": 3}})


@pytest.fixture(scope="session")
def host():
    return get_target("host")


@pytest.fixture(scope="session")
def m4():
    return get_target("cortex-m4")


@pytest.fixture(scope="session")
def a53():
    return get_target("cortex-a53")


@pytest.fixture(scope="session")
def a72():
    return get_target("cortex-a72")


@pytest.fixture(scope="session")
def matmul():
    return get_kernel("matmul_s8")


@pytest.fixture(scope="session")
def conv():
    return get_kernel("conv2d_s8")


@pytest.fixture(scope="session")
def dw():
    return get_kernel("dwconv2d_s8")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def each_value_once(items: list[pytest.Item]) -> set[str]:
    """The node ids of a few of one test's parametrized cases that together take every value
    of every parameter at least once: each time the case with the most values not yet taken,
    of equals the one whose values were taken least often (the first of those), until none is left. Values are told apart by their repr, the same
    in every xdist worker for the strings, numbers and containers parameters are made of."""
    values = {item.nodeid: {(name, repr(value)) for name, value in item.callspec.params.items()} for item in items}
    left, chosen, taken = set().union(*values.values()), set(), Counter()
    while left:
        best = max(values, key=lambda nodeid: (len(values[nodeid] & left), -sum(taken[v] for v in values[nodeid])))
        chosen.add(best)
        left -= values[best]
        taken.update(values[best])
    return chosen


def one_case(cases: list[pytest.Item]) -> pytest.Item:
    """The case a test marked `one_case(index=0)` runs in the default tier."""
    mark = cases[0].get_closest_marker("one_case")
    return cases[mark.args[0] if mark.args else 0]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks added here
def pytest_collection_modifyitems(config, items):
    """A test marked `matrix` runs in the default tier with every value of each of its
    parameters at least once; one marked `one_case` runs one case there, its first or the one
    at the index the mark gives (`@pytest.mark.one_case(2)`: its cases are rows of one check,
    more shapes, targets or paths of the same arithmetic, and that one is the most telling).
    Their other cases are marked `slow` (docs/testing.md)."""
    by_function: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        for rule in ("matrix", "one_case"):
            if item.get_closest_marker(rule) and hasattr(item, "callspec"):
                by_function.setdefault((rule, item.nodeid.split("[")[0]), []).append(item)
    for (rule, _), cases in by_function.items():
        default = each_value_once(cases) if rule == "matrix" else {one_case(cases).nodeid}
        for item in cases:
            if item.nodeid not in default:
                item.add_marker(pytest.mark.slow)


# EDGETUNE_TEST_CPU_LOG=FILE: each test appends "<cpu seconds>\t<node id>" to FILE, the CPU time
# of its worker and of the programs it ran (compilers, QEMU: children the worker waited for).
# Unlike wall time, CPU time hardly changes when other jobs share the cores, so a run on a
# busy machine still says which tests are the default tier's cost (docs/testing.md).
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    log = os.environ.get("EDGETUNE_TEST_CPU_LOG")
    if not log:
        yield
        return
    before = _cpu_seconds()
    yield
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"{_cpu_seconds() - before:.3f}\t{item.nodeid}\n")


def _cpu_seconds() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
