"""Choosing a patch plan by measured cost (`model export --patch auto[:BYTES]`): the candidate
plans for a model's first chain of convolutions (one or two stages, each ending where a
stride shrinks the tensors, a few band heights, the halo cached or recomputed), each one's RAM
from its memory plan (arena + static scratch + input and output, as `model verify` prints it),
the ones within the bound exported and run whole in the target's emulator, bit-exact with
TFLite Micro, and the fewest instructions kept. MCUNetV2 (Lin et al., NeurIPS 2021) searches
its patch settings jointly with the network; here the network is given and only the
execution is chosen."""
from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgetune.codegen.export import ExportError

from .patch_module import BANDED_KERNELS, PatchPlan, StagePlan
from .patches import HALOS, PatchError

BAND_ROWS = (1, 2, 4)
MAX_CANDIDATE_ENDS = 4  # stage ends considered (the first stride-2 layers)


@dataclass(frozen=True)
class Candidate:
    plan: PatchPlan | None  # None: the module without patches
    ram: int  # predicted: arena + static scratch + I/O
    instructions: int | None = None  # measured (None: not run, over the bound)
    problem: str = ""  # why it was not run or failed
    rendered_configs: tuple = ()  # its module's kernel functions and configurations (telling twins apart)


def first_chain(model) -> tuple:
    """The model's first layers that could run banded: int8 convolutions from the first
    operator on, each reading the one before it."""
    chain = []
    for layer in model.layers:
        ok = layer.kernel in BANDED_KERNELS and layer.op != "FULLY_CONNECTED" and layer.dtype == "int8"
        if not ok or (chain and layer.input_tensor != chain[-1].operator.outputs[0]):
            break
        chain.append(layer)
    return tuple(chain)


def candidate_plans(model) -> list[PatchPlan]:
    """One or two stages over the first chain, each ending after a stride-2 layer, the band
    instances on the layers' variants or on their kernels' default configurations (which keep
    no scratch in the arena)."""
    chain = first_chain(model)
    ends = [layer.index for layer in chain if layer.shape_dict.get("stride_h", 1) > 1][:MAX_CANDIDATE_ENDS]
    if not chain:
        return []
    first = chain[0].index
    structures = [((first, e),) for e in ends]
    structures += [((first, a), (a + 1, b)) for a, b in itertools.combinations(ends, 2)]
    return [PatchPlan(tuple(StagePlan(lo, hi, rows, halo, plain) for lo, hi in s))
            for s in structures for rows in BAND_ROWS for halo in HALOS for plain in (False, True)]


def predicted_ram(model, rendered, target) -> int:
    io = model.graph.interface_bytes
    # The static pointers of the variants with scratch in the arena count too, as verify counts them.
    from .ram_fit import pointer_bytes
    pointers = pointer_bytes(target) * sum(1 for _, arena, _ in rendered.scratch_needs if arena)
    return rendered.plan.arena_bytes + rendered.scratch.nbytes + io + pointers


def _render(model, target, chosen, plan):
    from .module import render_model_module  # the module imports this package's patch modules lazily too
    return render_model_module(model, target, chosen, name="patch_candidate", database="", date="", version="",
                               model_bytes=b"", patch=plan)


def rank_candidates(model, target, chosen, max_ram: int | None) -> list[Candidate]:
    """Every candidate plan (and no plan) with its predicted RAM; those over `max_ram` or that
    the model does not allow carry the reason."""
    out = []
    for plan in [None, *candidate_plans(model)]:
        try:
            rendered = _render(model, target, chosen, plan)
        except (PatchError, ExportError) as e:
            out.append(Candidate(plan, 0, None, str(e)))
            continue
        ram = predicted_ram(model, rendered, target)
        over = max_ram is not None and ram > max_ram
        out.append(Candidate(plan, ram, None, f"over the bound of {max_ram:,} B" if over else "",
                             _rendered_configs(rendered)))
    return _distinct(out)


def _distinct(candidates: list[Candidate]) -> list[Candidate]:
    """One candidate per module: a `:default` plan renders the same module as its plain twin
    when the layers' variants are their kernels' default configurations (no database), so it
    is listed and run once (the first, plain, kept)."""
    out, seen = [], set()
    for c in candidates:
        key = (_module_key(c.plan, c.rendered_configs), c.ram, c.problem) if c.rendered_configs else None
        if key is not None and key in seen:
            continue
        seen.add(key)
        out.append(c)
    return out


def _module_key(plan: PatchPlan | None, configs: tuple) -> tuple:
    stages = tuple((s.first, s.last, s.band_rows, s.halo) for s in plan.stages) if plan else ()
    return stages, configs


def _rendered_configs(rendered) -> tuple:
    """Every kernel function of the module with the configuration it runs: two modules of one
    plan structure with the same ones are the same module."""
    return tuple(sorted((k.function, repr(tuple(k.config))) for k in rendered.manifest.kernels))


def measure_candidates(model_path: Path, target, db, candidates: list[Candidate], export, verify) -> list[Candidate]:
    """Each runnable candidate exported and run in the target's emulator (one random input and
    the saturating one), bit-exact or marked failed; its instructions per inference."""
    out = []
    with tempfile.TemporaryDirectory(prefix="edgetune-patch-") as tmp:
        for n, c in enumerate(candidates):
            if c.problem:
                out.append(c)
                continue
            folder = Path(tmp) / f"c{n}"
            export(model_path, target, db, folder, patch=c.plan)
            outcome = verify(folder, target, 1)
            if not outcome.ok:
                out.append(Candidate(c.plan, c.ram, None, "not bit-exact with TFLite Micro"))
                continue
            out.append(Candidate(c.plan, outcome.size.ram_bytes, outcome.inferences[0].instructions))
    return out


def best_candidate(measured: list[Candidate]) -> Candidate:
    """The fewest instructions among the measured candidates (less RAM on a tie); none: the
    refusal names the least RAM any candidate reached, and its plan."""
    runs = [c for c in measured if c.instructions is not None and not c.problem]
    if runs:
        return min(runs, key=lambda c: (c.instructions, c.ram))
    planned = [c for c in measured if c.ram > 0]
    if not planned:
        reasons = sorted({c.problem for c in measured if c.problem})
        raise PatchError(f"--patch auto: no patch plan fits the bound ({reasons[0] if reasons else 'no candidate'})")
    least = min(planned, key=lambda c: c.ram)
    raise PatchError(f"--patch auto: no patch plan fits the bound: the least RAM a candidate reaches is "
                     f"{least.ram:,} B (plan {least.plan.text if least.plan else 'none'}: {least.problem})")


def no_gain_note(model_path: Path, target, db, rendered, plan: PatchPlan, objective: str, bounds,
                 compilers: tuple[str, ...]) -> str:
    """A line when an explicit plan's module needs no less RAM than the module without it
    (it still writes over its input); "" when the plan saves RAM."""
    from .export import choose_layers
    from .model import load_model

    model = load_model(model_path)
    chosen, _ = choose_layers(model, target, db, objective, bounds, compilers)
    patched, plain = (predicted_ram(model, rendered, target),
                      predicted_ram(model, _render(model, target, chosen, None), target))
    if patched < plain:
        return ""
    return (f"--patch {plan.text}: the plan saves no RAM ({patched:,} B, {plain:,} B without it), yet the module "
            "writes over its input; export without --patch to keep the input")


def choose_patch(model_path: Path, target, db, max_ram: int | None, compilers: tuple[str, ...] = ()
                 ) -> tuple[Candidate, list[Candidate]]:
    """The plan (or none) of fewest measured instructions within `max_ram`, and every candidate."""
    from .export import choose_layers, export_model
    from .model import load_model
    from .verify import verify_model

    model = load_model(model_path)
    chosen, _ = choose_layers(model, target, db, compilers=compilers)
    ranked = rank_candidates(model, target, chosen, max_ram)
    export = lambda path, t, d, folder, patch: export_model(path, t, d, folder, compilers=compilers, patch=patch)
    measured = measure_candidates(Path(model_path), target, db, ranked, export, verify_model)
    return best_candidate(measured), measured


def parse_auto(text: str) -> int | None | bool:
    """`auto` -> None (no bound), `auto:BYTES` -> BYTES; False when `text` is not an auto plan."""
    if text == "auto":
        return None
    if not text.startswith("auto:"):
        return False
    value = text[5:]
    if not value.isdigit() or int(value) <= 0:
        raise PatchError(f"--patch {text!r}: auto:BYTES takes a positive number of bytes")
    return int(value)

