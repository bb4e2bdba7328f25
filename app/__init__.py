"""edgetune: auto-tuning of C kernels for embedded and edge hardware.

This folder (app/) is the top of the `edgetune` package: the tuning session and the CLI,
which sit above hal, codegen, targets and tuner.
"""
__version__ = "0.1.0"

# The Python API (edgetune.api, docs/api.md), loaded on first use: `import edgetune` stays
# cheap, and edgetune's own parts (which import edgetune.errors) never import it.
API = ("tune", "best", "export", "verify", "tune_kernel", "register", "KernelDef", "Input", "Output", "Weight",
       "Scalar", "Vector")


def __getattr__(name: str):
    if name in API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'edgetune' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *API])
