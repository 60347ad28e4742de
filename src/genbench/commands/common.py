"""Options shared by the commands, declared once, and their validation. Four groups: the
server (URL, MODEL, KEY_ENV, KEY_FILE), thinking (THINK_TAGS, THINK_DIALECT), sampling
(MAX_TOKENS, TEMPERATURE, TOP_P, TOP_K, THINKING, PARAM, CONFIG: a job's request fields,
which `plan` and `generate` both take) and hidden-state storage (HIDDEN_SIZE,
LAYERS_CAPTURED, DTYPE_BYTES: `plan` and `inspect`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Any, get_type_hints

import orjson
import typer

from genbench import fmt
from genbench.errors import positive
from genbench.transport.endpoint import DEFAULT_KEY_ENV, endpoint
from genbench.transport.eventloop import run_async
from genbench.transport.open_files import fit_descriptors as descriptors
from genbench.transport.thinking import DEFAULT_TAGS

URL = typer.Option(
    None, "--url", metavar="URL", help="Server base URL, e.g. http://127.0.0.1:8000/v1"
)
MODEL = typer.Option(
    None, "--model", metavar="NAME", help="Model to use. [default: the only one served]"
)
KEY_ENV = typer.Option(
    DEFAULT_KEY_ENV,
    "--api-key-env",
    metavar="VAR",
    help="Environment variable holding the API key.",
)
KEY_FILE = typer.Option(
    None, "--api-key-file", metavar="PATH", help="File whose first line is the API key."
)
SERVE = typer.Option(
    None,
    "--serve",
    metavar="CMD",
    help="Start this engine and use it (its {port} a free loopback port, or its own "
    "--port N); stopped when genbench ends. 'local': the llama.cpp demo target. "
    "Repeatable (docs/engines.md).",
)
ENGINE_START_TIMEOUT = typer.Option(
    900.0,
    "--engine-start-timeout",
    help="Seconds a --serve engine may take to become healthy (a large model loads for "
    "minutes).",
)
JSON = typer.Option(False, "--json", help="Print one JSON object on stdout (for a "
                    "script); what run, plan, generate and inspect say to people goes to "
                    "stderr.")
THINK_TAGS = typer.Option(
    ",".join(DEFAULT_TAGS),
    "--think-tags",
    metavar="OPEN,CLOSE",
    help="The tags around thinking that arrives inline in content.",
)


TOOL_POLICY = typer.Option(
    "replay",
    "--tool-policy",
    help="Rows with tools: replay (the target calls again, the original results fed back "
    "in order) or keep (the original calls and results kept, plain answers regenerated).",
)


THINK_DIALECT = typer.Option(
    "auto",
    "--think-dialect",
    metavar="DIALECT",
    help="Where thinking arrives: auto (check's reply, then the replies, tell), separate, "
    "inline, inline-opened (the template opens <think>: text starts inside it) or none.",
)

# -- sampling: the request fields of a job (plan's pilot, generate), defaults the server's
MAX_TOKENS = typer.Option(
    None, "--max-tokens", help="The job's max_tokens. [default: none, natural length]"
)
TEMPERATURE = typer.Option(
    None, "--temperature", help="The job's temperature. [default: the server's]"
)
TOP_P = typer.Option(None, "--top-p", help="The job's top_p. [default: the server's]")
TOP_K = typer.Option(None, "--top-k", help="The job's top_k. [default: the server's]")
THINKING = typer.Option(
    None,
    "--thinking/--no-thinking",
    help="The job's chat_template_kwargs.enable_thinking. [default: the server's choice]",
)
PARAM = typer.Option(
    None,
    "--param",
    metavar="KEY=JSON",
    help="Another request field of the job, KEY=JSON; repeatable.",
)
CONFIG = typer.Option(
    None,
    "--config",
    metavar="FILE",
    help="The job's JSON or TOML file of request fields (flags override it).",
)

# -- hidden-state storage: what a drafter's training set would take (plan, inspect)
HIDDEN_SIZE = typer.Option(
    None, "--hidden-size", help="Hidden-state storage: the target model's hidden size."
)
LAYERS_CAPTURED = typer.Option(
    None, "--layers-captured", help="Hidden-state storage: layers kept per token."
)
DTYPE_BYTES = typer.Option(2, "--dtype-bytes", help="Hidden-state storage: bytes/value.")


__all__ = ["descriptors", "endpoint", "positive", "run_async"]  # called before a send


def print_json(doc: Any, default: Callable[[Any], Any] | None = None) -> None:
    """--json: the command's document on stdout, indented."""
    typer.echo(orjson.dumps(doc, default=default, option=orjson.OPT_INDENT_2).decode())


def signature(args: type, options: dict[str, Any]) -> inspect.Signature:
    """A command's signature for typer, from the dataclass of its options as typed (`args`,
    which gives each its type) and their flags (`options`, in --help's order: a typer
    option, or (default, help[, metavar]) for `--the-field-name`; without a metavar --help
    names the value by its type, `cli.metavar`). The command takes `**options` and
    makes `args(**options)` of them."""
    hints = {f.name: get_type_hints(args)[f.name] for f in fields(args)}
    if set(hints) != set(options):
        raise TypeError(f"options and {args.__name__} differ: {set(hints) ^ set(options)}")
    return inspect.Signature([
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[name],
                          default=typer.Option(o[0], "--" + name.replace("_", "-"), help=o[1],
                                             metavar=o[2] if len(o) > 2 else None)
                          if isinstance(o, tuple) else o)
        for name, o in options.items()
    ])  # fmt: skip


def loading(console: Any) -> Any:
    """What a command prints while a --serve engine loads: how long, and its last line."""

    def say(name: str, waited: float, last: str) -> None:
        tail = f"; its last line: {last[:160]}" if last else ""
        console.print(f"{name}: loading for {fmt.duration(waited)}{tail}", markup=False,
                      highlight=False)  # fmt: skip

    return say
