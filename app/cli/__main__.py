"""`python -m edgetune.cli`: the `edgetune` command, for a checkout without the console script."""
from . import main

main()
