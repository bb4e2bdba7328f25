"""`edgetune targets` (and `targets show NAME`) and `edgetune kernels`: what the HAL knows
about the targets, and the kernels with their tunable parameters."""
from __future__ import annotations

import json

import click

from edgetune.codegen import KERNELS
from edgetune.hal import Target
from edgetune.targets import get_target, target_names

from . import options


def target_json(target: Target, full: bool = False) -> dict:
    data = {"name": target.name, "description": target.description, "arch": target.arch,
            "core": {"name": target.core.name, "count": target.core.count, "clock_hz": target.core.clock_hz},
            "vector_units": [v.name for v in target.vector_units],
            "runner": target.runner.kind, "measures": target.measures,
            "compilers": [c.name for c in target.compilers]}
    if full:
        data["vector_units"] = [{"name": v.name, "register_bits": v.register_bits, "registers": v.registers,
                                 "lanes": dict(v.lanes), "int8_macs_per_cycle": v.int8_macs_per_cycle,
                                 "source": v.source} for v in target.vector_units]
        data["memory"] = [{"name": m.name, "kind": m.kind, "base": m.base, "size": m.size, "access": m.access,
                           "source": m.source} for m in target.memory]
        data["caches"] = [{"level": c.level, "kind": c.kind, "size": c.size, "line": c.line} for c in target.caches]
        data["power"] = None if target.power is None else {
            "active_mw": target.power.active_mw, "idle_mw": target.power.idle_mw, "source": target.power.source}
        data["cost"] = None if target.cost is None else {
            "source": target.cost.source, "static_mw": target.cost.static_mw, "issue_width": target.cost.issue_width,
            "overlapping_units": list(target.cost.overlapping_units),
            "classes": {name: {"cycles": c.cycles, "unit": c.unit, "energy_pj": c.energy_pj} for name, c in target.cost.classes}}
        data["measured_values"] = list(target.measured_values)
        data["core"].update(isa=target.core.isa, fpu=target.core.fpu, source=target.core.source,
                            extensions=list(target.core.extensions))
        data["npus"] = [{"name": n.name, "product": n.product, "macs_per_cycle": list(n.macs_per_cycle),
                         "clock_hz": n.clock_hz, "memory_modes": [m.name for m in n.memory_modes],
                         "ports": [{"name": p.name, "memory": p.memory, "region": p.region, "data_bits": p.data_bits,
                                    "writable": p.writable} for p in n.ports], "source": n.source} for n in target.npus]
        data["file"] = target.source_file
    return data


@click.group(invoke_without_command=True)
@options.as_json
@click.pass_context
def targets(ctx, as_json):
    """List the targets (or `targets show NAME`)."""
    if ctx.invoked_subcommand:
        return
    items = [get_target(name) for name in target_names()]
    if as_json:
        click.echo(json.dumps([target_json(t, full=True) for t in items], indent=2))
        return
    units = {t.name: ",".join(v.name for v in t.vector_units) or "-" for t in items}
    name_width = max(len(t.name) for t in items)  # cortex-a72-linux is wider than the rest
    kind_width = max(len(t.runner.kind) for t in items)
    units_width = max(len(u) for u in units.values())
    for t in items:
        click.echo(f"{t.name:{name_width}} {t.runner.kind:{kind_width}} {t.core.clock_hz / 1e6:8.0f} MHz  "
                   f"vector: {units[t.name]:{units_width}} {t.description}")


@targets.command("show")
@click.argument("name")
@options.as_json
def targets_show(name, as_json):
    """Everything the HAL knows about one target (a name or a path to a .toml file)."""
    t = get_target(name)
    data = target_json(t, full=True)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{t.name}: {t.description}\n  file: {t.source_file}")
    click.echo(f"  core: {t.core.name} x{t.core.count}, {t.core.isa}, {t.core.clock_hz / 1e6:.0f} MHz"
               + (f", extensions: {', '.join(t.core.extensions)}" if t.core.extensions else ""))
    for v in t.vector_units:
        lanes = ", ".join(f"{d}x{n}" for d, n in v.lanes)
        click.echo(f"  vector: {v.name} ({v.register_bits}-bit x{v.registers}; {lanes})")
    for m in t.memory:
        click.echo(f"  memory: {m.name:6} {m.kind:5} {m.base:#010x} {m.size // 1024:6} KiB {m.access}")
    for c in t.caches:
        click.echo(f"  cache: L{c.level} {c.kind} {c.size // 1024} KiB, {c.line} B lines")
    if t.power:
        click.echo(f"  power: {t.power.active_mw} mW active, {t.power.idle_mw} mW idle ({t.power.source})")
    if t.cost:
        units = f"; overlapping units {', '.join(t.cost.overlapping_units)}" if t.cost.overlapping_units else ""
        click.echo(f"  cost model: issue width {t.cost.issue_width:g}{units}; static {t.cost.static_mw:g} mW ({t.cost.source})")
    for n in t.npus:
        ports = ", ".join(f"{p.name}={p.memory}" for p in n.ports)
        click.echo(f"  npu: {n.name} ({n.product}; MACs/cycle {'/'.join(map(str, n.macs_per_cycle))}; {ports}; "
                   f"modes {', '.join(m.name for m in n.memory_modes)})")
    cpu = f" -cpu {t.runner.cpu}" if t.runner.cpu else ""
    click.echo(f"  runner: {t.runner.kind} {t.runner.program} {t.runner.machine}{cpu}".rstrip())
    click.echo(f"  compilers: {', '.join(c.name + '=' + c.command for c in t.compilers)}")


@click.command()
@options.as_json
@options.target
@options.kernel_file
def kernels(as_json, target_name, kernel_files):
    """List the kernels and their tunable parameters (with --kernel-file, only those files' kernels)."""
    target = get_target(target_name)
    items = []
    for kernel in [KERNELS[name] for name in kernel_files] if kernel_files else list(KERNELS.values()):
        if hasattr(kernel, "warn_unknown_units"):  # a user kernel: say why a misspelt unit's path is not listed
            kernel.warn_unknown_units(target)
        space = kernel.tuning_space(target, kernel.parse_shape(kernel.example_shape()))
        items.append({"name": kernel.name, "version": kernel.version, "description": kernel.description,
                      "shape": list(kernel.shape_keys), "example_shape": kernel.example_shape(),
                      "parameters": {p.name: {"values": list(p.values), "doc": p.doc} for p in space.params}})
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    width = max((len(name) for item in items for name in item["parameters"]), default=0)  # one column for all
    for item in items:
        click.echo(f"{item['name']} (shape {','.join(item['shape'])}): {item['description']}")
        for name, p in item["parameters"].items():
            click.echo(f"  {name:{width}}  {', '.join(map(str, p['values']))}")


