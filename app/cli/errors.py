"""How every command fails: edgetune's own input errors as one line and exit status 2, a
click usage error in the same form, Ctrl-C as 130, anything else as a bug (70). The root
group (root.py) applies it to every command; no command handles its own errors."""
from __future__ import annotations

import functools
import os
import sqlite3
import sys

import click

from ..errors import EdgetuneError

# Exit status of a bug (sysexits.h EX_SOFTWARE, "internal software error"): distinct from
# bad input (2), a failed check (1) and an interrupt (130).
BUG_EXIT_CODE = 70
INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C
TRACEBACK_ENV = "EDGETUNE_TRACEBACK"


def error_line(message: str) -> str:
    """The one form of every user-facing error: `edgetune: error: ...` on exactly one line.
    Whatever the message quotes (a path, a value read from a file) is shown with its line
    breaks and other control characters escaped (a newline as \\n, ESC as \\x1b), so a
    name cannot split the line or drive the terminal."""
    return f"edgetune: error: {printable(message)}"


def printable(message: str) -> str:
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in message)


def warn(text: str) -> None:
    click.echo(f"edgetune: warning: {printable(text)}", err=True)


class UserError(EdgetuneError, click.ClickException):
    """One line on stderr naming what is wrong, exit status 2."""

    exit_code = 2

    def show(self, file=None):
        click.echo(error_line(self.message), err=True)


def guard(fn):
    """Turn edgetune's own input errors (EdgetuneError, and nothing else: any other
    exception is a bug, reported as one by OneLineErrors) into one line and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError:
            raise
        except EdgetuneError as exc:
            raise UserError(str(exc)) from None

    wrapper.guarded = True
    return wrapper


def guard_all(command: click.Command) -> None:
    """Put every command under `command` (itself included) behind the guard, so a command
    invoked on its own (a test's CliRunner) fails as it does under `edgetune`."""
    if command.callback is not None and not getattr(command.callback, "guarded", False):
        command.callback = guard(command.callback)
    for sub in getattr(command, "commands", {}).values():
        guard_all(sub)


def damaged_database(exc: sqlite3.DatabaseError) -> str:
    """What to say when SQLite finds a database damaged part-way through a command (the
    file was opened fine): most often a database file replaced by another while the old
    one's -wal file stayed beside it."""
    return (f"the tuning database is damaged (SQLite: {exc}); if its file was replaced or copied while an "
            "old NAME-wal file stayed beside it, restore the file with its -wal, or remove the stale -wal")


def report_bug(exc: Exception) -> None:
    """An exception that is not an EdgetuneError escaped a command: a bug in edgetune, never
    bad input. One line saying so (the traceback too when $EDGETUNE_TRACEBACK is set), then
    exit status BUG_EXIT_CODE."""
    if os.environ.get(TRACEBACK_ENV):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    hint = "" if os.environ.get(TRACEBACK_ENV) else f"; {TRACEBACK_ENV}=1 prints the traceback"
    click.echo(f"edgetune: internal error: {type(exc).__name__}: {printable(str(exc))} "
               f"(a bug in edgetune, not in your input: please report it{hint})", err=True)
    sys.exit(BUG_EXIT_CODE)


class OneLineErrors(click.Group):
    """Click's own usage errors (an unknown option, a missing argument, a bad number) in
    edgetune's convention too: one line naming the culprit, exit status 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader went away (`edgetune kernels | head -1`): it read what it wanted, so this
            # is success; what is left unwritten goes to /dev/null, not into a second error.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise click.exceptions.Exit(0) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            command = exc.ctx.command_path[len(exc.ctx.find_root().command_path):].strip() if exc.ctx else ""
            where = f"{command}: " if command else ""
            UserError(f"{where}{exc.format_message()} (see --help)").show()
            sys.exit(UserError.exit_code)
        except click.ClickException as exc:
            if isinstance(exc, UserError):
                exc.show()
            else:  # click's own (a file it could not open, ...): the same one-line form
                click.echo(error_line(exc.format_message()), err=True)
            sys.exit(exc.exit_code)
        except click.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # Ctrl-C in a command other than `tune`
                click.echo("edgetune: interrupted (Ctrl-C); every trial already stored is kept: "
                           "run the same command again to resume", err=True)
                sys.exit(INTERRUPTED_EXIT)
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except EdgetuneError as exc:  # raised outside a guarded command (e.g. while parsing options)
            UserError(str(exc)).show()
            sys.exit(UserError.exit_code)
        except sqlite3.DatabaseError as exc:  # a file damaged under edgetune, not a bug of its own
            UserError(damaged_database(exc)).show()
            sys.exit(UserError.exit_code)
        except Exception as exc:  # noqa: BLE001 - whatever is left is a bug, and shows as one
            report_bug(exc)
        # Without standalone mode click returns a command's exit code instead of exiting.
        sys.exit(result if isinstance(result, int) else 0)
