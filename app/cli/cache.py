"""`edgetune cache`: what the cache folder holds, and removing it (all, or down to a size)."""
from __future__ import annotations

import click

from edgetune.targets import buildcache
from edgetune.targets.toolchain import cache_dir


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@click.group("cache")
def cache_group():
    """The cache of compiled variants, harness objects and plugins (EDGETUNE_CACHE)."""


@cache_group.command("info")
def cache_info_cmd():
    """Entries and size of each part of the cache."""
    click.echo(f"cache folder: {cache_dir()}")
    for part in buildcache.usage():
        click.echo(f"{part.part:<18} {part.entries:>6} {_size(part.bytes):>12}")


@cache_group.command("clear")
def cache_clear_cmd():
    """Remove everything edgetune cached; it is rebuilt on demand."""
    click.echo(f"cleared {_size(buildcache.clear())} from {cache_dir()}")


@cache_group.command("prune")
@click.option("--max-mb", type=click.FloatRange(min=0), required=True,
              help="Keep at most this many MiB of compiled variants, the most recently used.")
def cache_prune_cmd(max_mb):
    """Remove the least recently used compiled variants down to a size."""
    removed, freed = buildcache.prune(int(max_mb * 1024 * 1024))
    click.echo(f"removed {removed} entries ({_size(freed)})")
