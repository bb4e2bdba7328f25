"""edgetune: auto-tuning of C kernels for embedded and edge hardware.

This folder (app/) is the top of the `edgetune` package: the tuning session and the CLI,
which sit above hal, codegen, targets and tuner.
"""
import sys
import types

__version__ = "0.1.0"

# The Python API (edgetune.api, docs/api.md), loaded on first use: `import edgetune` stays
# cheap, and edgetune's own parts (which import edgetune.errors) never import it.
API = ("tune", "best", "export", "verify", "tune_kernel", "register", "KernelDef", "Input", "Output", "Weight",
       "Scalar", "Vector", "Binding", "quantize_multiplier")


class _Package(types.ModuleType):
    """`edgetune.export` and `edgetune.verify` are the API's functions, although modules of
    those names exist (app/export.py, app/verify.py: import them with `from edgetune.export
    import ...`, which reads sys.modules, never the package attribute)."""

    def __getattribute__(self, name: str):
        if name in API:
            from edgetune import api

            return getattr(api, name)
        return super().__getattribute__(name)


def __dir__():
    return sorted([*globals(), *API])


sys.modules[__name__].__class__ = _Package
