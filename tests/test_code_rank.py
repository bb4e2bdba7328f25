"""Ranking by compiled code (edgetune.tuner.code_rank): features stored in and read back from
a recording, a ranker that never learns from the space it scores, and the strategy wrapper
(deterministic with a seed, each proposal the best-ranked of its pool, no point lost)."""
from __future__ import annotations

import gzip
import json
from dataclasses import replace

import numpy as np
import pytest

from edgetune.tuner import Config, Outcome, Param, Trial
from edgetune.tuner.code_rank import CodeRanker, CodeRankerError, RankByCode, kernel_fit, kernel_fit_among
from edgetune.tuner.recorded import RecordedSpaceError, load_recorded, recorded_space_json, write_recorded
from edgetune.tuner.strategies import make_strategy

PARAMS = [Param("tile", (1, 2, 4, 8)), Param("unroll", (1, 2, 4)), Param("vector", ("c", "mve"))]


def configs():
    return [Config((("tile", t), ("unroll", u), ("vector", v))) for t in (1, 2, 4, 8) for u in (1, 2, 4)
            for v in ("c", "mve")]


def code_of(config: Config, scale: int) -> dict[str, int]:
    """Made-up code: Helium puts vector MACs in the hot loop (16 products each), tiling adds loads."""
    mve = config["vector"] == "mve"
    hot = 8 + config["tile"]
    return {"code_bytes": 100 * scale + 20 * config["unroll"], "hot_instructions": hot,
            "hot_vec_mac": 2 * mve, "hot_mac": 0 if mve else 2, "hot_load": config["tile"],
            "instructions": 40 + hot, "multiplies": 32 if mve else 2, "mac_loop_instructions": hot,
            "mac_loop_multiplies": 32 if mve else 2}


def cost_of(config: Config, scale: int) -> float:
    """A measured cost that the code explains: vector MACs win, wide tiles lose."""
    return scale * (1000 - 600 * (config["vector"] == "mve") + 50 * config["tile"] + 7 * config["unroll"])


def write_space(tmp_path, name: str, scale: int, failed: tuple[str, ...] = (), target: str = "cortex-m55"):
    trials, features = [], {}
    for config in configs():
        if config.key() in failed:
            trials.append(Trial(config, Outcome.COMPILE_ERROR, error="no"))
            continue
        trials.append(Trial(config, Outcome.OK, {"instructions": cost_of(config, scale)}))
        features[config.key()] = code_of(config, scale)
    document = recorded_space_json("toy", 1, target, {"n": scale}, "instructions", PARAMS, trials,
                                   provenance={"tool": "test"}, features=features)
    return write_recorded(tmp_path / f"{name}.json.gz", document)


def test_features_are_stored_and_read_back(tmp_path):
    failed = ("tile=2,unroll=1,vector=c",)
    path = write_space(tmp_path, "a", 1, failed)
    document = json.loads(gzip.decompress(path.read_bytes()))
    assert sum("features" in e for e in document["entries"]) == len(configs()) - 1
    recorded = load_recorded(path)
    assert len(recorded.features) == len(configs()) - 1
    for config in configs():
        index = recorded.space.index_of(config)
        if config.key() in failed:
            assert index not in recorded.features
        else:
            assert recorded.features[index] == {k: float(v) for k, v in code_of(config, 1).items()}


def test_a_recording_without_features_has_none(tmp_path):
    document = recorded_space_json("toy", 1, "t", {}, "instructions", PARAMS,
                                   [Trial(c, Outcome.OK, {"instructions": 1.0}) for c in configs()], {})
    recorded = load_recorded(write_recorded(tmp_path / "plain.json", document))
    assert recorded.features == {}


@pytest.mark.parametrize("bad", [{"code_bytes": "big"}, ["code_bytes"], {"code_bytes": True}])
def test_bad_features_are_named(tmp_path, bad):
    path = write_space(tmp_path, "a", 1)
    document = json.loads(gzip.decompress(path.read_bytes()))
    document["entries"][3]["features"] = bad
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    with pytest.raises(RecordedSpaceError, match=r"entries\[3\]: features"):
        load_recorded(path)


def test_the_ranker_never_learns_from_the_space_it_scores(tmp_path):
    spaces = [load_recorded(write_space(tmp_path, name, scale)) for name, scale in (("a", 1), ("b", 3), ("c", 7))]
    scored = spaces[1]
    ranker = CodeRanker.fit(spaces, scored)
    assert ranker.sources == (spaces[0].path, spaces[2].path)
    # The same file loaded again is the same space: still left out.
    again = load_recorded(scored.path)
    assert scored.path not in CodeRanker.fit([*spaces, again], scored).sources
    with pytest.raises(CodeRankerError, match="b.json.gz: no other recorded space"):
        CodeRanker.fit([scored, again], scored)
    # What it learnt elsewhere ranks the unseen space: its best predicted is a true top-quarter point.
    predicted = ranker.predicted_ranks(scored)
    assert set(predicted) == set(scored.features)
    truth = {i: scored.trials[i].value("instructions") for i in predicted}
    best_guess = min(predicted, key=predicted.get)
    assert sorted(truth.values()).index(truth[best_guess]) < len(truth) / 4


def wrapped_run(recorded, score, seed: int, pool: int = 4) -> list[str]:
    search = RankByCode(make_strategy("random", recorded.space, np.random.default_rng(seed), "instructions"),
                        score, pool)
    keys = []
    while configs_ := search.ask(1):
        search.tell([recorded.trial(configs_[0])])
        keys.append(configs_[0].key())
    return keys


def test_the_wrapper_is_deterministic_and_loses_no_point(tmp_path):
    recorded = load_recorded(write_space(tmp_path, "a", 1))

    def score(config):
        return cost_of(config, 1)

    first = wrapped_run(recorded, score, seed=5)
    assert first == wrapped_run(recorded, score, seed=5)
    assert first != wrapped_run(recorded, score, seed=6)
    assert sorted(first) == sorted(c.key() for c in recorded.space)  # every legal point, once


def test_each_proposal_is_the_best_ranked_of_its_pool(tmp_path):
    recorded = load_recorded(write_space(tmp_path, "a", 1))
    pool = make_strategy("random", recorded.space, np.random.default_rng(2), "instructions").ask(4)
    first = wrapped_run(recorded, lambda c: cost_of(c, 1), seed=2, pool=4)[0]
    assert first == min(pool, key=lambda c: cost_of(c, 1)).key()
    # Unscored candidates (no features) rank behind every scored one.
    unscored = pool[0].key()
    first = wrapped_run(recorded, lambda c: None if c.key() == unscored else 0.0, seed=2, pool=4)[0]
    assert first == pool[1].key()


def test_keep_skips_sure_losers_in_the_inner_order(tmp_path):
    recorded = load_recorded(write_space(tmp_path, "a", 1))
    order = make_strategy("random", recorded.space, np.random.default_rng(4), "instructions").ask(len(configs()))
    score = {c.key(): float(n % 3) for n, c in enumerate(order)}  # 0, 1, 2, 0, 1, 2, ...
    search = RankByCode(make_strategy("random", recorded.space, np.random.default_rng(4), "instructions"),
                        lambda c: score[c.key()], pool=4, keep=0.5)
    taken = []
    for _ in range(6):
        config = search.ask(1)[0]
        search.tell([recorded.trial(config)])
        taken.append(config.key())
    # The first goes through (nothing seen yet); from then on only candidates at or below the
    # median of the scores seen so far, in the inner strategy's order.
    assert taken[0] == order[0].key()
    assert all(score[k] <= 1.0 for k in taken) and [score[k] for k in taken[1:]].count(2.0) == 0
    positions = [next(i for i, c in enumerate(order) if c.key() == k) for k in taken]
    assert positions == sorted(positions)
    with pytest.raises(ValueError):
        RankByCode(search.inner, lambda c: 0.0, keep=0.0)


def test_replay_ranks_by_code_when_given_spaces_to_learn_from(tmp_path):
    from click.testing import CliRunner

    from edgetune.cli import main

    scored, other = write_space(tmp_path, "a", 1), write_space(tmp_path, "b", 3)
    args = ["replay", str(scored), "--strategy", "random", "--budget", "6", "--seed", "1", "--json"]
    ranked = CliRunner().invoke(main, [*args, "--rank-with", str(other), "--rank-with", str(scored)])
    assert ranked.exit_code == 0, ranked.output
    again = CliRunner().invoke(main, [*args, "--rank-with", str(other), "--rank-with", str(scored)])
    # the same trials in the same order (the strategy's wall time per proposal aside)
    def trials(result):
        return [[(x["config"], x["value"]) for x in run["trials"]] for run in json.loads(result.output)["repeats"]]
    assert trials(again) == trials(ranked)
    plain = json.loads(CliRunner().invoke(main, args).output)["repeats"][0]["trace"]
    assert len(json.loads(ranked.output)["repeats"][0]["trace"]) == 6
    # The ranker learnt that Helium wins: its sure losers (plain C) are skipped, not so without it.
    assert sum(json.loads(ranked.output)["repeats"][0]["trace"]) < sum(plain)
    # A space without features to rank: one line naming it, exit 2.
    bare = tmp_path / "bare.json"
    write_recorded(bare, recorded_space_json("toy", 1, "t", {}, "instructions", PARAMS,
                                             [Trial(c, Outcome.OK, {"instructions": 1.0}) for c in configs()], {}))
    result = CliRunner().invoke(main, ["replay", str(bare), "--rank-with", str(other)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and "bare.json" in result.output


def test_unscored_candidates_and_points_told_from_elsewhere(tmp_path):
    recorded = load_recorded(write_space(tmp_path, "a", 1))
    search = RankByCode(make_strategy("random", recorded.space, np.random.default_rng(0), "instructions"),
                        lambda c: None, pool=3, keep=0.5)
    first = search.ask(1)[0]  # nothing scored: the first of the pool, the other two in reserve
    assert search.scored == 3
    # Every point told from elsewhere (another worker measured it) is never proposed again.
    others = [c for c in recorded.space if c.key() != first.key()]
    search.tell([recorded.trial(c) for c in [first, *others[:-1]]])
    assert [c.key() for c in search.ask(5)] == [others[-1].key()]
    assert search.ask(1) == []


def test_multiplying_loop_counts_add_their_shares_and_old_recordings_rank_as_before():
    from edgetune.tuner.code_rank import feature_matrix
    old = [{"hot_instructions": 10, "hot_load": 4, "hot_mac": 2}, {"hot_instructions": 20, "hot_load": 2, "hot_mac": 8}]
    names = ("hot_instructions", "hot_load", "hot_mac")
    plain = feature_matrix(old, names)
    assert plain.shape == (2, 5)  # three log counts, two hot shares
    assert plain[0, 3:].tolist() == [0.4, 0.2]
    new = [dict(row, mac_loop_instructions=5, mac_loop_mac=2, copy_loop_instructions=5) for row in old]
    wider = feature_matrix(new, (*names, "mac_loop_instructions", "mac_loop_mac", "copy_loop_instructions"))
    assert wider.shape == (2, 9)  # six log counts, two hot shares, one multiplying-loop share
    assert wider[:, -1].tolist() == [0.4, 0.4]


def test_a_feature_some_recordings_lack_is_left_out_not_read_as_zero(tmp_path):
    from edgetune.tuner.code_rank import feature_names
    from dataclasses import replace
    older, newer = (load_recorded(write_space(tmp_path, name, n)) for n, name in ((1, "older"), (2, "newer")))
    newer = replace(newer, features={i: dict(f, mac_loops=1) for i, f in newer.features.items()})
    assert "mac_loops" in feature_names([newer]) and "mac_loops" not in feature_names([older, newer])
    assert feature_names([older, newer]) == feature_names([older])


def test_kernel_fit_is_the_rankers_worst_rank_correlation_on_the_kernels_other_spaces(tmp_path):
    spaces = [load_recorded(write_space(tmp_path, name, scale)) for name, scale in (("a", 1), ("b", 3), ("c", 7))]
    # Code that explains the cost everywhere: the ranker learnt without a and b ranks b well.
    fit = kernel_fit(spaces, spaces[0])
    assert fit is not None and fit > 0.8
    assert fit == min(CodeRanker.fit(spaces[1:], s).agreement(s) for s in spaces[1:])  # each learnt from the other
    # A space of the kernel whose cost the code does not explain (its order reversed) pulls it down.
    reversed_trials = {i: Trial(t.config, t.outcome, {"instructions": 1e6 / t.value("instructions")})
                       for i, t in spaces[2].trials.items()}
    odd = [*spaces[:2], replace(spaces[2], trials=reversed_trials)]
    assert kernel_fit(odd, odd[0]) < 0
    # A kernel with no other recorded space gives no evidence.
    assert kernel_fit(spaces[:1], spaces[0]) is None


def test_kernel_fit_judges_the_kernels_spaces_on_the_scored_target_only(tmp_path):
    spaces = [load_recorded(write_space(tmp_path, name, scale)) for name, scale in (("a", 1), ("b", 3), ("c", 7))]
    # The kernel on another target, where the code does not explain the cost (order reversed).
    elsewhere = load_recorded(write_space(tmp_path, "m4", 5, target="cortex-m4"))
    elsewhere = replace(elsewhere, trials={i: Trial(t.config, t.outcome, {"instructions": 1e6 / t.value("instructions")})
                                           for i, t in elsewhere.trials.items()})
    both = [*spaces, elsewhere]
    rest = both[1:]

    def fit_on(sibling):
        return CodeRanker.fit(rest, sibling).agreement(sibling)

    # Scoring a (M55), its M55 siblings b and c are the evidence; the M4 space is learnt
    # from but not judged ...
    on_m55 = kernel_fit(both, spaces[0])
    assert on_m55 == min(fit_on(spaces[1]), fit_on(spaces[2]))
    assert on_m55 == kernel_fit_among(rest, "toy", target="cortex-m55")
    # ... while with no target given every space of the kernel is judged, the M4 one too.
    assert fit_on(elsewhere) < on_m55
    assert kernel_fit_among(rest, "toy") == fit_on(elsewhere)
    # A target with no other space of the kernel has no evidence.
    assert kernel_fit_among(rest, "toy", target="cortex-a53") is None
    assert kernel_fit([spaces[0], elsewhere], spaces[0]) is None


def test_replay_runs_the_gated_transfer_with_code_by_its_name(tmp_path):
    from click.testing import CliRunner

    from edgetune.cli import main

    scored, b, c = (write_space(tmp_path, name, scale) for name, scale in (("a", 1), ("b", 3), ("c", 7)))
    args = ["replay", str(scored), "--budget", "8", "--seed", "2", "--json"]
    ranked = CliRunner().invoke(main, [*args, "--strategy", "transfer+code", "--rank-with", str(b), "--rank-with", str(c)])
    assert ranked.exit_code == 0, ranked.output
    out = json.loads(ranked.output)
    assert out["strategy"] == "transfer+code" and len(out["repeats"][0]["trace"]) == 8
    again = CliRunner().invoke(main, [*args, "--strategy", "transfer+code", "--rank-with", str(b), "--rank-with", str(c)])
    assert json.loads(again.output)["repeats"][0]["trace"] == out["repeats"][0]["trace"]  # a seed reproduces it
    plain = json.loads(CliRunner().invoke(main, [*args, "--strategy", "transfer"]).output)
    # Instructions per product rank the toy kernel's other spaces well: the code has a say
    # from the first plan, and it changes the choices.
    assert [t["config"] for t in out["repeats"][0]["trials"]] != [t["config"] for t in plain["repeats"][0]["trials"]]
    # Without the kernel's other spaces the gate waits for this space's own trials.
    alone = CliRunner().invoke(main, [*args, "--strategy", "transfer+code"])
    assert alone.exit_code == 0, alone.output
    refused = CliRunner().invoke(main, [*args, "--strategy", "transfer+code", "--rank-with", str(b), "--rank-keep", "0.5"])
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
    assert "--rank-keep" in refused.output


def test_replay_refuses_the_gated_transfer_on_a_space_whose_features_count_no_multiplies(tmp_path):
    from click.testing import CliRunner

    from edgetune.cli import main

    path = write_space(tmp_path, "old", 1)
    document = json.loads(gzip.decompress(path.read_bytes()))
    for entry in document["entries"]:
        entry.get("features", {}).pop("mac_loop_multiplies", None)  # recorded before products were counted
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    before = path.read_bytes()
    refused = CliRunner().invoke(main, ["replay", str(path), "--budget", "4", "--strategy", "transfer+code"])
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
    assert str(path) in refused.output and "multiplies" in refused.output
    assert path.read_bytes() == before


def test_replay_says_what_the_code_ranking_judged_and_refuses_rank_with_files_that_cannot_serve(tmp_path):
    from click.testing import CliRunner

    from edgetune.cli import main

    scored, sibling = write_space(tmp_path, "a", 1), write_space(tmp_path, "b", 3)
    elsewhere = write_space(tmp_path, "m4", 5, target="cortex-m4")
    bare = write_space(tmp_path, "bare", 2)
    document = json.loads(gzip.decompress(bare.read_bytes()))
    for entry in document["entries"]:
        entry.pop("features", None)
    bare.write_bytes(gzip.compress(json.dumps(document).encode()))
    args = ["replay", str(scored), "--budget", "4"]
    # A folder's files at once: the space itself and the M4 one are not judged, and it says so.
    given = [f"--rank-with={p}" for p in (scored, sibling, elsewhere, bare)]
    out = CliRunner().invoke(main, [*args, "--strategy", "transfer+code", *given, "--json"])
    assert out.exit_code == 0, out.output
    ranking = json.loads(out.output)["code_ranking"]
    assert ranking["judged_on"] == [str(sibling)] and ranking["kernel_fit"]["spaces"] == 1
    text = CliRunner().invoke(main, [*args, "--strategy", "transfer+code", *given]).output
    assert f"kernel fit {ranking['kernel_fit']['rho']:.2f} on 1 space, judged on {sibling}" in text
    alone = CliRunner().invoke(main, [*args, "--strategy", "transfer+code", f"--rank-with={elsewhere}"]).output
    assert "no kernel fit, judged on no --rank-with space of the same kernel and target" in alone
    for extra, named in ((["--strategy", "random", "--rank-with", str(bare)], str(bare)),
                         (["--strategy", "random", "--rank-with", str(scored)], str(scored)),
                         (["--strategy", "random", "--rank-keep", "0.5"], "--rank-with")):
        refused = CliRunner().invoke(main, [*args, *extra])
        assert refused.exit_code == 2, (extra, refused.output)
        assert len(refused.output.strip().splitlines()) == 1 and named in refused.output, refused.output
    # The M4 space serves a learnt ranker, which learns from any kernel and target.
    assert CliRunner().invoke(main, [*args, "--strategy", "random", "--rank-with", str(elsewhere)]).exit_code == 0
