"""The root of edgetune's user-facing errors.

Every exception that means "the input is wrong" (a file, a key, a value, a flag, a folder)
derives from `EdgetuneError`; the CLI shows those as one line naming the culprit and exits
with status 2. Any other exception escaping a command is a bug in edgetune and is reported
as one (docs/architecture.md, "User-facing errors").

This module is the one module every part (hal and tuner too) may import: it imports
nothing, so it adds no arrow between the parts.
"""


class EdgetuneError(Exception):
    """Bad input, named in the message: a user can act on it without reading code."""
