"""edgetune: auto-tuning of C kernels for embedded and edge hardware.

This folder (app/) is the top of the `edgetune` package: the tuning session and the CLI,
which sit above hal, codegen, targets and tuner.
"""
__version__ = "0.1.0"
