"""What `tune`, `best` and `record` print about a workload: its summary as text or JSON."""
from __future__ import annotations

from dataclasses import asdict

import click

from edgetune.tuner.code_explore import GATE_KERNEL_RHO, GATE_RHO, MIN_SPACES, KernelFit

from ..session import TuneSummary


def summary_json(summary: TuneSummary, db_path: str) -> dict:
    w = summary.workload
    data = {"kernel": w.kernel, "kernel_version": w.kernel_version, "target": w.target, "shape": w.shape_dict(),
            "objective": summary.objective, "constraints": [b.text() for b in summary.bounds],
            "infeasible": summary.infeasible, "trials": summary.trials, "new_trials": summary.new_trials,
            "failed": summary.failed, "failures": summary.failures, "db": str(db_path), "stopped": summary.stopped,
            "prior_trials": summary.prior_used, "code_ranking": _ranking_json(summary),
            "best": None}
    if summary.best is not None:
        trial = summary.best.trial
        data["best"] = {"config": trial.config.as_dict(), **trial.values, "trial_id": summary.best.id,
                        "created": summary.best.created, "compiler_version": trial.info.get("compiler_version", "")}
    return data


def _ranking_json(summary: TuneSummary) -> dict | None:
    use = summary.code_ranking
    if use is None:
        return None
    return {"kernel_fit": None if use.kernel_fit is None else asdict(use.kernel_fit),
            "voted_from_start": use.voted_from_start, "voting_now": use.voting_now,
            "compiled": use.compiled}


STOP_REASONS = {
    "budget": "the budget is reached",
    "exhausted": "the space is exhausted: every legal configuration is measured, before the budget was reached",
    "time": "the --time-budget is spent",
    "patience": "--patience evaluations in a row brought no new best",
    "interrupted": "interrupted (Ctrl-C); the stored trials are kept: run the same command again to resume",
}


def print_summary(summary: TuneSummary, show_stop: bool = False) -> None:
    w = summary.workload
    shape = ",".join(f"{k}={v}" for k, v in w.shape)
    click.echo(f"{w.kernel} {shape} on {w.target}: {summary.trials} trials stored "
               f"({summary.new_trials} new), {summary.failed} failed")
    if show_stop:  # only a run has a reason to stop; `best` and `record` print no such line
        click.echo(f"  stopped: {STOP_REASONS.get(summary.stopped, summary.stopped)}")
    if show_stop and summary.prior_stored:
        print_priors(summary)
    if show_stop and summary.code_ranking is not None:
        print_code_ranking(summary)
    if summary.failures:
        click.echo("  failures: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.failures.items())))
    if summary.bounds:
        click.echo(f"  constraints: {', '.join(b.text() for b in summary.bounds)} ({summary.infeasible} trials break them)")
    if summary.best is None:
        click.echo("  no successful trial within the constraints" if summary.infeasible else "  no successful trial yet")
        return
    trial = summary.best.trial
    shown = [name for name in ("instructions", "cycles", "energy_uj", "time_ns", "code_bytes") if name in trial.values]
    click.echo(f"  best: {summary.objective}={trial.values[summary.objective]:g}  "
               + "  ".join(f"{name}={trial.values[name]:g}" for name in shown if name != summary.objective))
    click.echo(f"        {trial.config.key()}")


def print_priors(summary: TuneSummary) -> None:
    where = f"{summary.workload.kernel} on other workloads ({', '.join(summary.prior_targets)})"
    if summary.prior_used:
        click.echo(f"  priors: learnt from {summary.prior_used} of {summary.prior_stored} stored trials of {where}")
    else:
        click.echo(f"  priors: none of the {summary.prior_stored} stored trials of {where} maps into this space")


def print_code_ranking(summary: TuneSummary) -> None:
    """What `transfer+code`'s ranking did: whether the code had a say, and why (its gate,
    docs/code-ranking-live.md), and how many candidates it compiled to rank them."""
    use = summary.code_ranking
    if use.voted_from_start:
        say = (f"the code voted from the first plan (design points from its screen), and keeps its vote while "
               f"it ranks this workload's own trials at {GATE_RHO:g} or more "
               f"({'it does now' if use.voting_now else 'not now'})")
    else:
        say = (f"the code votes only while its ranking of this workload's own trials reaches {GATE_RHO:g} "
               f"({'it does now' if use.voting_now else 'not now'})")
    click.echo(f"  code ranking: {ranking_evidence(use.kernel_fit, summary.workload.kernel)}: {say}; "
               f"{use.compiled} candidates compiled and ranked")


def ranking_evidence(fit: KernelFit | None, kernel: str) -> str:
    """The code ranking's evidence before any trial, in words (tune's and model tune's lines)."""
    if fit is None:
        return f"no other recorded space of {kernel} on this target to judge it by"
    spaces = f"{fit.spaces} recorded space{'' if fit.spaces == 1 else 's'}"
    if fit.spaces < MIN_SPACES:  # one space is one shape
        verdict = f"one shape: it takes {MIN_SPACES} to vote from the start"
    else:
        verdict = f"{'>=' if fit.rho >= GATE_KERNEL_RHO else '<'} {GATE_KERNEL_RHO:g}"
    return f"the code estimate ranks {kernel}'s {spaces} on this target at {fit.rho:.2f} ({verdict})"
