"""The `genbench` command line. Each command is a thin shell over a module that does the work."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand

from genbench import __version__
from genbench.errors import ExitCode, GenbenchError
from genbench.redact import redact
from genbench.transport.eventloop import Interrupted

app = typer.Typer(
    name="genbench",
    help="Measure, forecast and run large generation jobs on OpenAI-compatible LLM servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"genbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """genbench: check, run, plan, generate, inspect, export, compare, report."""


# name -> (module, function, help). Commands are imported only when needed: a `genbench sim`
# started by a test should not pay for importing numpy and the report code.
COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "check": ("genbench.commands.check", "check", None),
    "run": ("genbench.commands.run", "run", None),
    "plan": ("genbench.commands.plan", "plan", None),
    "generate": ("genbench.commands.generate", "generate", None),
    "inspect": ("genbench.commands.inspect", "inspect_cmd", None),
    "export": ("genbench.commands.export", "export_cmd", None),
    "merge": ("genbench.commands.merge", "merge_cmd", None),
    "hidden-states": ("genbench.commands.hidden_states", "hidden_states_cmd", None),
    "compare": ("genbench.commands.compare", "compare_cmd", None),
    "report": ("genbench.commands.report", "report_cmd", None),
    "sim": (
        "genbench.commands.sim",
        "sim",
        "Run the reference OpenAI-compatible server with known timing and faults.",
    ),
}


# Old spellings of renamed flags, per command: still accepted, with a warning on stderr, so
# scripts written for an earlier genbench keep working while they are updated (docs/cli.md).
ALIASES: dict[str, dict[str, str]] = {
    "run": {"--prompts": "--prompts-per-length", "--workload": "--input"},
    "check": {"--timeout": "--test-timeout"},  # elsewhere: seconds of silence
    "export": {"--min-tokens": "--min-turn-tokens"},  # inspect's is per row
    "plan": {"--warmup": "--warmup-time"},
    "generate": {"--output": "--out", "--shard-size": "--part-size"},
    "report": {"--output": "--out"},
}


def apply_aliases(argv: list[str]) -> list[str]:
    """argv with every old flag spelling of its command replaced by the new one."""
    command = next((a for a in argv if not a.startswith("-")), None)
    table = ALIASES.get(command or "", {})
    if not table:
        return argv
    new: list[str] = []
    warned: set[str] = set()
    for i, arg in enumerate(argv):
        if arg == "--":
            return new + argv[i:]
        name, eq, value = arg.partition("=")
        if name in table:
            if name not in warned:
                warned.add(name)
                typer.echo(
                    f"genbench: warning: {command} {name} is now {table[name]}; "
                    "the old spelling will go away",
                    err=True,
                )
            arg = table[name] + eq + value
        new.append(arg)
    return new


def _register(argv: list[str]) -> None:
    """Register the command named on the command line, or all of them (for --help)."""
    import importlib

    first = next((a for a in argv if not a.startswith("-")), None)
    names = [first] if first in COMMANDS else list(COMMANDS)
    for name in names:
        module, func, help_text = COMMANDS[name]
        fn = getattr(importlib.import_module(module), func)
        app.command(name, help=help_text, cls=_Command)(_said_when_interrupted(fn))


# typer's placeholder of an option's type (`<int>`, `<list[str]>`, `<path>`) -> the word
# --help shows for an option declared without a metavar of its own
_WORDS = {"int": "N", "float": "NUMBER", "str": "TEXT", "path": "PATH", "file": "FILE",
          "dir": "DIR"}  # fmt: skip
_SECONDS = ("time", "timeout", "backoff", "drain", "duration", "every", "deadline")


def metavar(opt: Any, ctx: Any) -> str | None:
    """The word --help shows for an option's value: its declared metavar, else one made
    from its type (a float named for time is SECONDS). typer 0.29 shows a python type
    instead (`<list[str]>`), which no user should have to read; an older typer, click's
    word (None: left to it)."""
    if opt.metavar or not hasattr(opt, "display_type"):
        return opt.metavar
    shown = opt.display_type(ctx).strip("<>")
    inner = shown.removeprefix("list[").removesuffix("]").lower()
    word = _WORDS.get(inner, "VALUE")
    if word == "NUMBER" and any(w in opt.name.split("_") for w in _SECONDS):
        word = "SECONDS"
    return word


class _Argument(TyperArgument):
    """An argument shown as click shows one: `PATH` or `RUN...`, in the usage line and the
    help, never typer's `{path}` and its python type (`<list[Path]>`)."""

    def _usage_display_name(self) -> str:
        name = self._rich_display_name()
        return name if self.required else f"[{name}]"

    def _rich_display_name(self) -> str:
        return (self.metavar or self.name.upper()) + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


class _Command(TyperCommand):
    """typer's command, every value named in words (`metavar`, `_Argument`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ctx = typer.Context(self)
        for p in self.params:
            if isinstance(p, TyperArgument):
                p.__class__ = _Argument
                p.metavar = p.metavar or p.name.upper()  # errors too: "Missing argument 'PATH'"
            elif not getattr(p, "is_flag", False) and not p.count:
                p.metavar = metavar(p, ctx)


def _said_when_interrupted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A Ctrl-C or SIGTERM the command did not take itself ends it with one line, exit 130
    or 143 (typer would end it silently)."""

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt as e:
            raise typer.Exit(_interrupted(e)) from None

    return command


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM where no event loop runs (run_async takes it there): taken as a Ctrl-C, so
    what a command started (engines, a live display) is stopped by the same path."""
    raise Interrupted(signum)


def main(argv: list[str] | None = None) -> None:
    """Entry point: every GenbenchError becomes one line on stderr and its exit code."""
    argv = apply_aliases(sys.argv[1:] if argv is None else argv)
    _register(argv)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        rc = app(args=argv, standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except GenbenchError as e:
        typer.echo(f"genbench: error: {redact(str(e))}", err=True)
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        typer.echo("genbench: aborted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except KeyboardInterrupt as e:
        sys.exit(_interrupted(e))
    except Exception as e:  # click usage errors (typer may vendor its own click)
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            hint = ""
            if getattr(e, "ctx", None) is not None and e.exit_code == 2:
                hint = f" (see '{e.ctx.command_path} --help')"
            typer.echo(f"genbench: error: {e.format_message()}{hint}", err=True)
            sys.exit(e.exit_code)
        raise


def _interrupted(e: BaseException) -> int:
    """Says why the command ended; its exit code (128 + the signal)."""
    stop = e if isinstance(e, Interrupted) else Interrupted(signal.SIGINT)
    typer.echo(f"genbench: {stop.said}", err=True)
    return stop.exit_code
