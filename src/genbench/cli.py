"""The `genbench` command line. Each command is a thin shell over a module that does the work."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from typing import Any

import typer

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
        app.command(name, help=help_text)(_said_when_interrupted(fn))


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
