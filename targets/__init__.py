"""edgetune.targets: the shipped target descriptions and the ways to build and run on them."""
from .catalog import get_target, target_file, target_names

__all__ = ["get_target", "target_file", "target_names"]
