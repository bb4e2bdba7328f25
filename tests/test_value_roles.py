"""Value roles: prior trials from another target carry over where their target-specific
values (memory regions, plain C compiled for another vector unit) have a counterpart.
Unit tests of the mapping in the tuner, of the roles the HAL and codegen derive from the
target files, and of transfer on our own recorded spaces (bench/spaces/) of the M55 and M4."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen.roles import plain_c_role, value_roles
from edgetune.hal.model import KIND_ORDER, MEMORY_KINDS
from edgetune.session import prior_trials
from edgetune.targets.catalog import shipped_target
from edgetune.tuner import (Config, Outcome, PriorTrials, Space, Trial, TuningDatabase, ValueRoles, Workload, choice,
                            make_strategy)
from edgetune.tuner.recorded import as_prior, load_recorded
from edgetune.tuner.strategies.base import translation
from edgetune.tuner.strategies.transfer import map_prior
from edgetune.value_roles import target_roles

SPACES = Path(__file__).resolve().parents[1] / "bench" / "spaces"
OBJECTIVE = "instructions"


def by_type(mapping: dict) -> dict:
    return {value: mine for (_, value), mine in mapping.items()}


# --- the mapping, in the tuner ---------------------------------------------------------------
def test_values_map_to_the_value_with_the_same_role():
    theirs = ValueRoles.of({"where": {"dtcm": "near0", "sram2": "near1"}})
    ours = ValueRoles.of({"where": {"ssram23": "near0", "psram": "near1"}})
    assert by_type(translation(theirs, ours, "where", ["ssram23", "psram"])) == {"dtcm": "ssram23", "sram2": "psram"}


def test_a_value_whose_role_has_no_counterpart_is_left_out():
    theirs = ValueRoles.of({"where": {"dtcm": "near0", "sram2": "near1", "qspi": "near2"}})
    ours = ValueRoles.of({"where": {"ssram23": "near0", "psram": "near1"}})
    mapped = by_type(translation(theirs, ours, "where", ["ssram23", "psram"]))
    assert "qspi" not in mapped and mapped["sram2"] == "psram"


def test_unlisted_values_are_their_own_role():
    theirs = ValueRoles.of({"vector": {"c": "c+mve"}})
    ours = ValueRoles.of({"vector": {"c": "c"}})
    mapped = by_type(translation(theirs, ours, "vector", ["c", "dsp"]))
    assert mapped == {"dsp": "dsp"}  # mve is no value here, and their c is not our c
    same = ValueRoles.of({"vector": {"c": "c+mve"}})
    assert by_type(translation(theirs, same, "vector", ["c", "mve", "dsp"])) == {"c": "c", "mve": "mve", "dsp": "dsp"}


def test_without_roles_on_either_side_values_carry_over_by_name():
    roles = ValueRoles.of({"where": {"dtcm": "near0"}})
    assert translation(ValueRoles(), roles, "where", ["dtcm"]) is None
    assert translation(roles, ValueRoles(), "where", ["dtcm"]) is None
    assert translation(roles, roles, "other", [1, 2]) is None


def test_roles_keep_one_and_true_apart():
    theirs = ValueRoles.of({"flag": {True: "on"}})
    ours = ValueRoles.of({"flag": {1: "on"}})
    mapped = translation(theirs, ours, "flag", [1, 2])
    assert mapped[(bool, True)] == 1 and (int, 1) not in mapped


def test_roles_must_be_one_to_one():
    with pytest.raises(ValueError, match="one to one"):
        ValueRoles.of({"where": {"dtcm": "near0", "sram2": "near0"}})
    shared = ValueRoles.of({"vector": {"c": "dsp"}})  # c takes the role dsp already is
    with pytest.raises(ValueError, match="share a role"):
        translation(ValueRoles.of({"vector": {}}), shared, "vector", ["c", "dsp"])


def placement_space(regions: list[str]) -> Space:
    return Space([choice("tile", [1, 2, 4, 8]), choice("weights_in", regions), choice("activations_in", regions)])


def placement_prior(space: Space, roles: ValueRoles) -> tuple[PriorTrials, ...]:
    trials = tuple(Trial(c, Outcome.OK, {OBJECTIVE: 10 * c["tile"] + (5 if c["weights_in"] == space.params[1].values[1]
                                                                      else 0)})
                   for c in space)
    return (PriorTrials("other-board", trials, roles),)


def test_transfer_learns_from_another_boards_regions_by_role():
    there = placement_space(["dtcm", "sram2"])
    here = placement_space(["ssram23", "psram"])
    their_roles = ValueRoles.of({n: {"dtcm": "near0", "sram2": "near1"} for n in ("weights_in", "activations_in")})
    our_roles = ValueRoles.of({n: {"ssram23": "near0", "psram": "near1"} for n in ("weights_in", "activations_in")})
    prior = placement_prior(there, their_roles)
    by_name = make_strategy("transfer", here, np.random.default_rng(0), OBJECTIVE, prior)
    by_role = make_strategy("transfer", here, np.random.default_rng(0), OBJECTIVE, prior, roles=our_roles)
    assert by_name.prior_size == 0  # no region of theirs is named like one of ours
    assert by_role.prior_size == len(there)
    features, _ = map_prior(here, OBJECTIVE, prior, 10**6, our_roles)
    # dtcm -> ssram23 (digit 0), sram2 -> psram (digit 1), in both placement columns
    assert sorted({tuple(row[1:]) for row in features}) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    first = by_role.ask(1)[0]
    assert first["tile"] == 1 and first["weights_in"] == "ssram23"  # the prior's best, mapped


def test_a_prior_with_a_parameter_left_out_takes_this_spaces_default():
    here = Space([choice("tile", [1, 2]), choice("vector", ["c", "dsp"], default="dsp")])
    prior = (PriorTrials("old", (Trial(Config((("tile", 2),)), Outcome.OK, {OBJECTIVE: 3}),),
                         ValueRoles.of({"vector": {"c": "c"}})),)
    features, _ = map_prior(here, OBJECTIVE, prior, 100, ValueRoles.of({"vector": {"c": "c+mve"}}))
    assert features.tolist() == [[1, 1]]


# --- the roles of our targets -----------------------------------------------------------------
def test_every_memory_kind_has_a_place_in_the_order():
    assert set(KIND_ORDER) == MEMORY_KINDS


def test_placement_roles_rank_regions_nearest_first():
    m55, m4 = shipped_target("cortex-m55"), shipped_target("cortex-m4")
    assert m55.placement_roles == (("dtcm", "near0"), ("sram2", "near1"))  # tcm before sram
    assert m4.placement_roles == (("ssram23", "near0"), ("psram", "near1"))  # sram before dram
    # The rank follows the regions, not the order of preference: reversed, the same roles.
    reversed_m55 = replace(m55, firmware=replace(m55.firmware, io_regions=("sram2", "dtcm")))
    assert dict(reversed_m55.placement_roles) == dict(m55.placement_roles)


def test_regions_of_one_kind_rank_by_wait_states_then_preference():
    m4 = shipped_target("cortex-m4")
    slow = [replace(r, kind="sram", wait_states=3) if r.name == "psram" else r for r in m4.memory]
    assert replace(m4, memory=tuple(slow)).placement_roles == (("ssram23", "near0"), ("psram", "near1"))
    tied = [replace(r, kind="sram", wait_states=0) if r.name == "psram" else r for r in m4.memory]
    flipped = replace(m4, memory=tuple(tied), firmware=replace(m4.firmware, io_regions=("psram", "ssram23")))
    assert flipped.placement_roles == (("psram", "near0"), ("ssram23", "near1"))


def test_plain_c_is_named_by_the_units_it_is_compiled_for():
    assert plain_c_role(shipped_target("cortex-m55")) == "c+mve"
    assert plain_c_role(shipped_target("cortex-m4")) == "c"
    assert plain_c_role(shipped_target("cortex-a53")) == "c+neon"
    m4, m7 = value_roles(shipped_target("cortex-m4")), value_roles(shipped_target("cortex-m7"))
    assert m4 == m7  # the same memory map and no vector unit: every value carries over


def test_shipped_target_never_reads_a_path():
    assert shipped_target("cortex-m4").name == "cortex-m4"
    for name in ["../boards/cortex-m4", "cortex-m4.toml", "/etc/passwd", "no-such-board", "", 3]:
        assert shipped_target(name) is None
    assert target_roles("no-such-board") == ValueRoles()


# --- transfer between the M55 and the M4, on our recordings -----------------------------------
@pytest.fixture(scope="module")
def conv():
    return {t: load_recorded(SPACES / f"conv2d_s8-cortex-{t}-h3w3i16o16k3.json.gz") for t in ("m4", "m55")}


def usable(here, there, roles: bool) -> np.ndarray:
    prior = [as_prior(there, target_roles(there.target) if roles else ValueRoles())]
    return map_prior(here.space, here.objective, prior, 10**6, target_roles(here.target) if roles else ValueRoles())[0]


def test_a_prior_recorded_on_the_m4_is_usable_on_the_m55(conv):
    here, there = conv["m55"], conv["m4"]
    assert len(usable(here, there, roles=False)) == 0  # ssram23 is no region of the M55
    rows = usable(here, there, roles=True)
    dsp = [t for t in there.trials.values() if t.config["vector"] == "dsp"]
    assert len(rows) == len(dsp) > 0  # the DSP path maps; plain C is Helium-vectorised on the M55
    names = here.space.names
    placement = {here.space.params[names.index(n)].values[int(d)] for row in rows
                 for n, d in zip(names, row) if n in ("weights_in", "activations_in")}
    assert placement == {"dtcm"}  # the M4's ssram23 stands for the M55's dtcm
    assert {here.space.params[names.index("vector")].values[int(row[names.index("vector")])] for row in rows} == {"dsp"}


def test_mve_trials_of_the_m55_are_dropped_on_the_m4(conv):
    here, there = conv["m4"], conv["m55"]
    rows = usable(here, there, roles=True)
    mve = sum(t.config["vector"] == "mve" for t in there.trials.values())
    dsp = sum(t.config["vector"] == "dsp" for t in there.trials.values())
    assert mve > 0 and len(rows) == dsp < len(there.trials) - mve  # mve and plain C left out


def test_transfer_on_the_m4_starts_from_the_m55s_mapped_best(conv):
    here, there = conv["m4"], conv["m55"]
    prior = [as_prior(there, target_roles(there.target))]
    search = make_strategy("transfer", here.space, np.random.default_rng(0), OBJECTIVE, prior,
                           roles=target_roles(here.target))
    assert search.prior_size > 0
    first = search.ask(4)
    assert all(c["weights_in"] == "ssram23" for c in first)


# --- the session hands each stored workload's roles over --------------------------------------
def test_prior_trials_carry_their_targets_roles(tmp_path):
    db = TuningDatabase(tmp_path / "t.db")
    here = Workload("conv2d_s8", 3, "cortex-m55", (("h", 3),))
    m4 = Workload("conv2d_s8", 3, "cortex-m4", (("h", 3),))
    mine = Workload("conv2d_s8", 3, "my-own-board", (("h", 3),))
    for workload in (here, m4, mine):
        db.record(workload, Trial(Config((("tile", 1),)), Outcome.OK, {OBJECTIVE: 5}), "random", 0)
    m55_target = shipped_target("cortex-m55")
    prior = {p.source: p.roles for p in prior_trials(db, here, m55_target)}
    assert prior[m4.key()] == value_roles(shipped_target("cortex-m4"))
    assert prior[mine.key()] == ValueRoles()  # a target we cannot read: values by name, as before
    own = replace(m55_target, name="my-own-board")  # ... unless it is the target being tuned
    assert {p.source: p.roles for p in prior_trials(db, here, own)}[mine.key()] == value_roles(own)


def test_replay_maps_its_priors_by_the_recorded_targets_roles(conv, monkeypatch):
    import edgetune.replay as replay_module

    seen = []
    real = replay_module.replay
    monkeypatch.setattr(replay_module, "replay", lambda *args: seen.append(args) or real(*args))
    result = replay_module.replay_json(conv["m4"], "transfer", 3, 0, 1, prior=[conv["m55"]])
    (recorded, _strategy, _budget, _seed, priors, _wrap, roles), = seen
    assert roles == target_roles("cortex-m4") and priors[0].roles == target_roles("cortex-m55")
    assert len(result["repeats"][0]["trace"]) == 3


class Stop(Exception):
    pass


def test_a_tune_on_the_m4_learns_from_the_m55s_trials_by_role(matmul, m4, m55, tmp_path, monkeypatch):
    import edgetune.session as session

    shape = {"m": 4, "n": 4, "k": 4}
    db = TuningDatabase(tmp_path / "t.db")
    there = session.workload_of(matmul, m55, shape)
    m55_space = session.search_space(matmul, m55, shape, "instructions")
    for n, config in enumerate(m55_space):
        db.record(there, Trial(config, Outcome.OK, {OBJECTIVE: 100 + n}), "random", 0)
    built = []

    def capture(*args, **kwargs):
        built.append(session.STRATEGIES["transfer"](*args[1:4], prior=args[4], budget=kwargs["budget"],
                                                    roles=kwargs["roles"]))
        raise Stop  # the strategy is all this test is about: nothing is built or run

    monkeypatch.setattr(session, "make_strategy", capture)
    with pytest.raises(Stop):
        session.tune(session.TuneRequest(matmul, m4, shape, "transfer", budget=4, jobs=1, seed=0), db)
    search, = built
    assert search._roles == value_roles(m4) and search._prior[0].roles == value_roles(m55)
    # Plain C and Helium have no counterpart on the M4; the DSP and plain-loop (naive) points do.
    mapped = sum(c["vector"] in ("dsp", "naive") for c in m55_space)
    assert search.prior_size == mapped > sum(c["vector"] == "naive" for c in m55_space) > 0


def _tune_m4_after(tmp_path, matmul, m55, keep) -> str:
    """`edgetune tune` of matmul_s8 on the M4 (one trial) after the M55 trials whose
    configuration `keep` accepts: its output."""
    import edgetune.session as session
    from click.testing import CliRunner

    from edgetune.cli import main

    shape = {"m": 4, "n": 4, "k": 4}
    db = TuningDatabase(tmp_path / "t.db")
    there = session.workload_of(matmul, m55, shape)
    for n, config in enumerate(c for c in session.search_space(matmul, m55, shape, "instructions") if keep(c)):
        db.record(there, Trial(config, Outcome.OK, {OBJECTIVE: 100 + n}), "random", 0)
    result = CliRunner().invoke(main, ["tune", "matmul_s8", "--shape", "m=4,n=4,k=4", "--target", "cortex-m4",
                                       "--budget", "1", "--jobs", "1", "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.qemu
def test_tune_says_how_many_of_another_targets_trials_it_learnt_from(matmul, m55, tmp_path):
    import edgetune.session as session

    m55_space = list(session.search_space(matmul, m55, {"m": 4, "n": 4, "k": 4}, "instructions"))
    mapped = sum(c["vector"] in ("dsp", "naive") for c in m55_space)
    output = _tune_m4_after(tmp_path, matmul, m55, lambda c: True)
    assert (f"  priors: learnt from {mapped} of {len(m55_space)} stored trials of matmul_s8 on other workloads "
            "(cortex-m55)\n") in output


@pytest.mark.qemu
def test_tune_says_when_none_of_another_targets_trials_maps(matmul, m55, tmp_path):
    output = _tune_m4_after(tmp_path, matmul, m55, lambda c: c["vector"] == "mve")  # Helium: none on the M4
    assert "  priors: none of the " in output and " stored trials of matmul_s8 on other workloads (cortex-m55) " \
        "maps into this space\n" in output
