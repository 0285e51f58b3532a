"""A command group that imports a command's module only when that command runs.

``accelnet --help`` lists every command from a table of names and one-line helps
(:data:`accelnet.cli.main.COMMANDS`) without importing them; ``accelnet status`` imports
the client commands only (not the simulator's scipy, the demo's numpy). The table's help
lines are checked against the commands' own by a test, so they cannot drift apart.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from difflib import get_close_matches
from typing import TYPE_CHECKING

import typer
from typer._click.exceptions import UsageError  # typer's own copy of click
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from typer._click.core import Command, Context
    from typer._click.formatting import HelpFormatter


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """A command not imported yet: ``target`` is ``"module:attribute"``, a function (a
    command) or a :class:`typer.Typer` (a group of commands); ``help`` its one-line help."""

    target: str
    help: str


def load(name: str, entry: LazyCommand) -> Command:
    """The click command ``entry`` stands for, named ``name`` (its module imported now)."""
    module, attr = entry.target.split(":")
    obj = getattr(importlib.import_module(module), attr)
    if isinstance(obj, typer.Typer):
        cmd: Command = typer.main.get_group(obj)
    else:
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command(name)(obj)
        cmd = typer.main.get_command(single)
    cmd.name = name
    tidy(cmd)
    return cmd


def tidy(cmd: Command) -> None:
    """Flags (``--wait``, ``--json``, ``--help``) show no ``<bool>`` in help: they take no
    value. For ``cmd``, its own help option and every command under it."""
    for param in cmd.params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    helper = cmd.get_help_option(typer.Context(cmd))
    if helper is not None:
        helper.metavar = ""
    for sub in getattr(cmd, "commands", {}).values():
        tidy(sub)


class LazyGroup(TyperGroup):
    """A typer group whose commands come from :attr:`lazy` (set on a subclass): listed with
    their one-line help without an import; imported when one is resolved to run (or to
    complete its arguments)."""

    lazy: dict[str, LazyCommand] = {}  # noqa: RUF012 - read-only, set per subclass

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        tidy(self)  # the root's own flags (--version, --install-completion...)
        super().format_help(ctx, formatter)

    def list_commands(self, ctx: Context) -> list[str]:
        eager = super().list_commands(ctx)
        return [*eager, *(name for name in self.lazy if name not in eager)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        entry = self.lazy.get(cmd_name)
        if entry is None:
            return None
        # for the help listing: a stand-in with the name and help line only
        return TyperCommand(cmd_name, help=entry.help, short_help=entry.help)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        if args and args[0] in self.lazy and args[0] not in self.commands:
            self.add_command(load(args[0], self.lazy[args[0]]), args[0])
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:  # suggest among the lazy names too
            _suggest(exc, args, self.lazy)
            raise


def _suggest(exc: UsageError, args: list[str], names: dict[str, LazyCommand]) -> None:
    """Add 'Did you mean ...?' for a mistyped command name (as typer does for its own)."""
    if not args or "Did you mean" in exc.message:
        return
    matches = get_close_matches(args[0], list(names))
    if matches:
        exc.message = f"{exc.message.rstrip('.')}. Did you mean " + ", ".join(
            repr(m) for m in matches) + "?"  # fmt: skip
