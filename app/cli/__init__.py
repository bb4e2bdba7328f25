"""The `edgetune` command line (the console script `edgetune = edgetune.cli:main`). Names
become objects here and nowhere else.

One module per command group: targets.py (`targets`, `kernels`), tune.py (`tune`, `best`),
export.py (`export`, `verify`), report.py (`record`, `replay`, `report`), db.py (`db ...`),
npu.py (`place`, and `tune/best --device NPU`), model.py with model_tune.py and
model_report.py (`model ...`), cache.py (`cache ...`). root.py joins them into `main`;
options.py declares every option more than one command takes; errors.py is how every
command fails (one line, exit status 2 for bad input, 70 for a bug, 130 for Ctrl-C)."""
from __future__ import annotations

from .root import main

__all__ = ["main"]
