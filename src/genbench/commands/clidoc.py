"""docs/cli.md, generated from the command line itself:
`python -m genbench.commands.clidoc > docs/cli.md`.

Why generated: a hand-written flag list drifts from the code the first time someone adds an
option. The vocabulary below (one meaning per flag name, in every command) is the part a
person writes; the generator refuses to run while a flag of the app has no meaning here, and
a test fails while docs/cli.md differs from what this module prints.
"""

from __future__ import annotations

import re
import sys
from typing import Any

REGENERATE = "PYTHONPATH=src python -m genbench.commands.clidoc > docs/cli.md"

RULES = """\
# genbench command line

Generated from the code by `{regenerate}`; a test fails when this file is stale.

## The rule

A flag name means one thing, with one kind of value, in every command that has it:

* **`-i/--input` or `--prompts FILE`**: a prompt file (JSONL or Parquet), in `run`, `plan`
  and `generate`. A count of prompts is spelled out: `run --prompts-per-length N`, whose
  old spelling is `run --prompts`, so `run` takes the file as `-i/--input` only.
* **`-c/--concurrency`**: requests in flight per server, in every command that sends load.
  Where a command sweeps (`run`) it takes one number or a comma-separated list; `auto`
  (the default of `run` on a server and of `generate` without `--plan`) finds the server's
  knee by climbing; `generate --plan` runs the plan's, and `plan`'s pilot 32 (`plan -c
  auto`: the pilot climbs to the knee first, and the plan carries the C it chose).
* **`-o/--out`**: where a command that writes puts what it makes: a directory (`run`,
  `plan`'s pilot, `generate`, `inspect`'s clean copy) or a file (`report`'s HTML,
  `export`'s trainer file).
* **Counts and times are told apart by name**: `--warmup N` is a number of requests,
  `--warmup-time SECONDS` seconds of load; every other duration in seconds ends in
  `-time`, `-timeout` or is named for time (`--duration`, `--drain`, `--progress-every`).
* **The job's request fields** (`--temperature`, `--top-p`, `--top-k`, `--max-tokens`,
  `--thinking`, `--param`, `--config`, `--turns`) mean the same in `plan` and `generate`,
  so a plan forecasts the job the same flags will run; `run --thinking` and `run
  --temperature` too (the server's by default, everywhere).
* **`--timeout`**: seconds a request may go silent before it is abandoned; `check`'s test
  request, timed whole, is `--test-timeout`. **`--min-tokens`** is `inspect`'s per row;
  `export`'s per generated turn is `--min-turn-tokens`. A test walks every command's
  options and fails on a name with two defaults or kinds of value, but for the few named
  with why (`tests/core/test_flag_meanings.py`).
* **`--think-tags OPEN,CLOSE`**: where a server sends its thinking inline in `content`,
  the tags genbench splits it at, in every command that sends requests.
* **Defaults** are shown in one style, `[default: X]`, in `--help` and below; where the
  default depends on another flag, each case is named (`[default: 3; --quick 2]`).
* **Renamed flags** keep their old spelling as a hidden alias that still works and
  prints a warning on stderr (table at the end).
"""

# The vocabulary: one meaning per flag, whatever command it is given to. Keyed by the
# flag's first long name as declared; an option with several names has one entry.
MEANINGS: dict[str, str] = {
    "--allowance": "Percent difference shown as within noise when the drift is unmeasured.",
    "--api-key-env": "Environment variable holding the API key (sim: the key it requires).",
    "--api-key-file": "File whose first line is the API key.",
    "--bootstrap": "Bootstrap replicates for the forecast's error bar.",
    "--bytes-per-token": "Output text bytes per token, when not measured.",
    "--answers": "The answers' shape: conversations, OpenAI Batch output lines, or both.",
    "--concurrency": "Requests in flight per server; one or a list where the command sweeps; "
    "auto (run, plan's pilot, generate): found by climbing.",
    "--config": "JSON or TOML file of the job's request fields.",
    "--connect-timeout": "Seconds to wait for a connection.",
    "--deadline": "The job's deadline (5d, 36h, 90m, 2d12h).",
    "--down-timeout": "Seconds with every server down before the job gives up.",
    "--drain": "On Ctrl-C, seconds to let requests in flight finish.",
    "--dialect": "Reference server: whose server it plays (sim, sglang, vllm).",
    "--drift": "Reference server: its speed wanders by PCT over PERIOD seconds.",
    "--drop": "Defects to leave out of inspect's clean copy.",
    "--dtype-bytes": "Hidden-state storage: bytes per value.",
    "--dup-min-chars": "Duplicates: answers shorter than this are not compared.",
    "--drift-sample": "Token fidelity: turns whose ids are round-tripped through the tokenizer.",
    "--duration": "Sustained load: seconds per concurrency.",
    "--engine-backoff": "Seconds before a dead engine's first restart (doubling).",
    "--engine-hang-timeout": "Seconds an engine may be alive but not answer /health.",
    "--engine-restarts": "Restarts of a --serve engine that died, at most.",
    "--engine-start-timeout": "Seconds a --serve engine may take to become healthy.",
    "--examples": "Example ids kept per defect.",
    "--extra-body": "JSON object merged into every request.",
    "--fault": "A fault the reference server injects; repeatable.",
    "--serve": "An engine command genbench starts, watches and stops; repeatable.",
    "--force": "Go ahead despite a mismatch genbench would otherwise refuse.",
    "--for": "The drafter trainer whose default hidden-state layers to take: eagle3 or dflash.",
    "--format": "Output file format: jsonl or parquet (generate); the trainer's format (export).",
    "--from": "A `genbench run` result to forecast from (repeatable, to compare "
    "configurations), or a pilot's plan to plan again from its records.",
    "--gpus-per-server": "GPUs per server, for the job's cost.",
    "--hidden-states": "Keep each generated turn's hidden states, written by the engine.",
    "--hidden-size": "Hidden-state storage: the target model's hidden size.",
    "--host": "Address the reference server binds.",
    "--input": "The prompt file (JSONL or Parquet): `-i`, `--input` and `--prompts` are one "
    "flag (in `run`, `--prompts` is the old spelling of `--prompts-per-length`).",
    "--job-files": "Plan: directory for the job's Slurm array script and Kubernetes manifest.",
    "--states-fp8": "Hidden states in FP8 with a scale per token (hs-connectors' format).",
    "--job-out": "Plan: the job's output directory, whose free space the forecast is held to.",
    "--json": "One JSON object on stdout; any tables for people on stderr.",
    "--layers": "Hidden-state layer ids, vLLM's numbering, comma-separated.",
    "--layers-captured": "Hidden-state storage: layers kept per token.",
    "--lengths": "Single-stream output lengths, comma-separated.",
    "--limit": "Only the first N rows.",
    "--loop-cover": "Loops: share of the examined window the repetition covers.",
    "--loop-repeats": "Loops: times the repeated unit occurs at least.",
    "--loop-window": "Loops: characters at the end of a text examined.",
    "--max-bars": "Requests drawn at most in a timeline plot.",
    "--max-batch": "Reference server: requests decoding at once.",
    "--max-model-len": "Reference server: context length.",
    "--max-tokens": "The job's output token cap per turn.",
    "--metrics-host": "Address --metrics-port listens on (loopback unless you choose).",
    "--metrics-port": "Serve the job's progress as Prometheus metrics on this port.",
    "--metrics-url": "A worker's /metrics URL, repeatable: their counters summed per phase.",
    "--min-tokens": "Inspect: rows with fewer output tokens are short.",
    "--min-turn-tokens": "Export: generated turns with fewer tokens are short and left out.",
    "--model": "The model's name: the one to request (sim: the one it serves).",
    "--natural": "Let the model stop on its own instead of forcing the length.",
    "--no-metrics": "Reference server: serve no /metrics.",
    "--out": "Where the command writes what it makes: a directory, or a file (report, export).",
    "--output-len": "Reference server: the natural output length distribution.",
    "--param": "Another request field of the job, KEY=JSON; repeatable.",
    "--per-seq-ms": "Reference server: milliseconds each sequence adds to a decode step.",
    "--phase": "The phase drawn in timeline plots.",
    "--pilot": "Pilot requests, when fixed in advance.",
    "--pilot-max-time": "Seconds a pilot runs at most.",
    "--pilot-min-time": "Seconds a pilot runs at least.",
    "--plan": "A plan.json whose forecast is shown beside the live ETA.",
    "--png": "Directory for each plot as a PNG.",
    "--port": "Port the reference server binds.",
    "--prefill-tps": "Reference server: prompt tokens per second of prefill.",
    "--price": "Price per GPU-hour, for the job's cost.",
    "--progress-every": "Seconds between progress lines off a terminal (a line for people).",
    "--progress-json": "Off a terminal, progress as JSON lines on stderr instead.",
    "--prompts-per-length": "Requests per single-stream output length.",
    "--quick": "A short run: fewer lengths and concurrencies.",
    "--rate": "Output tokens/s of one server, for arithmetic without a measurement.",
    "--reasoning-dialect": "Reference server: the field its thinking text goes to.",
    "--repeat": "Run the whole benchmark N times, so the drift between runs is measured.",
    "--report": "Also write report.html beside the result.",
    "--requests-per-slot": "Sustained load: K·C requests per concurrency C.",
    "--retries": "Retries per row before it fails.",
    "--retry-backoff": "Seconds before the first retry (doubling each time).",
    "--retry-errors": "Generate the rows of the errors file again.",
    "--samples": "Samples to forecast, comma-separated, K/M suffixes.",
    "--save": "Where inspect writes inspect.json.",
    "--seed": "Seed for the command's random choices.",
    "--server-alpha": "Servers: p-value below which a difference is not noise.",
    "--server-effect": "Servers: smallest effect size worth naming.",
    "--servers": "Identical servers sharing the job.",
    "--shape": "Sweep load shapes: burst, sustained.",
    "--shard": "This client's share i/N of the ids, or auto: from Slurm, Kubernetes or RANK.",
    "--shards": "Merge: the shard scheme of the new directory (1: none).",
    "--part-size": "Start a new output file (the next part) after this many bytes.",
    "--skip": "Phases to skip: warmup, single, sweep.",
    "--skip-invalid": "Write bad input rows to the errors file and go on.",
    "--spec-accept": "Reference server: draft acceptance probability.",
    "--spec-k": "Reference server: tokens per decode chunk.",
    "--spec-accept-match": "Reference server: draft acceptance for requests containing a text.",
    "--per-request-spec-decode-metrics": "Reference server: each response says its acceptance, "
    "as vLLM's flag of that name.",
    "--speed-drift": "Percent the server's speed may move over the job beyond what the pilot "
    "saw (default 15 × job / (job + pilot), or `default` to ask for it; 0: it holds its "
    "speed).",
    "--sweep-tokens": "Output tokens per sweep request.",
    "--tags": "Leftover tags to look for, comma-separated.",
    "--target-error": "Percent error the pilot stops at.",
    "--temperature": "Sampling temperature of the requests; default the server's.",
    "--think-tags": "The tags around thinking that arrives inline in content (OPEN,CLOSE).",
    "--think-dialect": "Where thinking arrives, for when check and the replies cannot tell: "
    "auto, separate, inline, inline-opened or none.",
    "--kv-tokens": "Reference server: a KV cache of this many tokens (preemption when full).",
    "--keep-raw": "Write each answer also as generated, thinking and tags in it.",
    "--keep-cut": "Export: keep the turns cut by max_tokens (left out by default).",
    "--empty-system": "Export (specforge): an empty system turn where none was sent.",
    "--token-ids": "Token ids the server generated, kept per turn (generate: auto, on, off; "
    "sim: which engine's way it gives them: none, vllm, sglang).",
    "--thinking": "chat_template_kwargs.enable_thinking of the requests.",
    "--thinking-tokens": "Reference server: output tokens that go to the reasoning field.",
    "--timeout": "Seconds a request may go unanswered before it is abandoned.",
    "--test-timeout": "Check: seconds the test request may take, whole.",
    "--tokens-per-sample": "Output tokens per sample, thinking included.",
    "--top-k": "Sampling top_k.",
    "--top-p": "Sampling top_p.",
    "--tps": "Reference server: decode tokens/s of one stream.",
    "--truncated": "What to do with rows cut by max_tokens: keep or error.",
    "--input-changed": "What to do with done rows whose request changed or that left the "
    "input: regenerate or keep.",
    "--ttft-ms": "Reference server: prefill milliseconds before the first token.",
    "--tool-calls": "Reference server: tool calls a conversation makes before it answers.",
    "--tool-policy": "Rows with tools: replay the calls (cached results fed back) or keep them.",
    "--turns": "Which assistant turns to generate: all or last.",
    "--url": "Server base URL (generate: repeatable, one per server; inspect: its tokenizer).",
    "--url-file": "File of servers, one 'URL [CONCURRENCY]' per line.",
    "--version": "Print the version and exit.",
    "--versus": "A second server run alternately with --url, for a comparison.",
    "--warmup": "Warm-up requests, discarded.",
    "--warmup-time": "Seconds of warm-up load, discarded.",
    "--warmup-tokens": "max_tokens of a warm-up request.",
}

_DEFAULT = re.compile(r"\s*\[default: ([^\]]*)\]")


def app_commands() -> dict[str, Any]:
    """Every command of the app, as click commands, in the order `genbench --help` lists them."""
    import typer

    from genbench import cli

    cli._register([])
    return dict(typer.main.get_command(cli.app).commands)  # type: ignore[attr-defined]


def options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if p.param_type_name == "option" and not p.hidden]


def long_name(opt: Any) -> str:
    return next(n for n in opt.opts if n.startswith("--"))


def shown_default(opt: Any) -> str | None:
    """The default an option's help states, or None when it states none."""
    m = _DEFAULT.search(opt.help or "")
    if m:
        return m[1]
    if opt.is_flag and opt.secondary_opts and opt.show_default is not False:  # --x/--no-x
        return (opt.opts if opt.default else opt.secondary_opts)[0].lstrip("-")  # as --help
    if opt.required or opt.show_default is False or opt.is_flag:
        return None
    if opt.default is None or opt.default in ("", []):
        return None
    return str(opt.default)


def problems() -> list[str]:
    """Ways the app breaks the vocabulary: a flag with no meaning here, or one name used for
    two options that differ in their other names or in taking a value."""
    from genbench.cli import ALIASES

    seen: dict[str, tuple[frozenset[str], bool, str]] = {}
    found: list[str] = []
    used: set[str] = set()
    for cname, cmd in app_commands().items():
        for opt in options(cmd):
            key = long_name(opt)
            used.add(key)
            if key not in MEANINGS:
                found.append(f"{cname} {key}: no meaning in genbench.commands.clidoc.MEANINGS")
            names = frozenset(opt.opts + opt.secondary_opts)
            for n in names:
                first = seen.setdefault(n, (names, opt.is_flag, cname))
                kept = {*ALIASES.get(cname, {}), *ALIASES.get(first[2], {})}  # old spellings
                if (first[0] - kept, first[1]) != (names - kept, opt.is_flag):
                    found.append(f"{n}: one option in {first[2]}, another in {cname}")
    stale = set(MEANINGS) - used - {"--version"}
    found += [f"{n}: in MEANINGS but no command has it" for n in sorted(stale)]
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def cli_markdown() -> str:
    """The whole of docs/cli.md."""
    bad = problems()
    if bad:
        raise SystemExit("the command line breaks its vocabulary:\n  " + "\n  ".join(bad))
    cmds = app_commands()
    lines = [RULES.format(regenerate=REGENERATE), *_every_flag(cmds), *_old_spellings()]
    for cname, cmd in cmds.items():
        lines += _command(cname, cmd)
    return "\n".join(lines) + "\n"


def _every_flag(cmds: dict[str, Any]) -> list[str]:
    """One row per flag name: its meaning and the commands that have it."""
    lines = ["## Every flag", "", "| flag | meaning | commands |", "|---|---|---|"]
    rows: dict[str, tuple[str, list[str]]] = {}
    for cname, cmd in cmds.items():
        for opt in options(cmd):
            names = ", ".join(sorted(opt.opts + opt.secondary_opts, key=lambda n: len(n) > 2))
            shown, where = rows.get(long_name(opt), ("", []))  # the most names any command has
            rows[long_name(opt)] = (max(shown, names, key=len), [*where, cname])
    for key in sorted(rows, key=lambda k: k.lstrip("-")):
        names, where = rows[key]
        lines.append(f"| `{names}` | {_cell(MEANINGS[key])} | {', '.join(where)} |")
    return lines


def _old_spellings() -> list[str]:
    from genbench.cli import ALIASES

    lines = ["", "## Old spellings", "", "Still accepted, with a warning on stderr.", ""]
    lines += ["| command | old | new |", "|---|---|---|"]
    for cname, table in ALIASES.items():
        for old, new in table.items():
            lines.append(f"| {cname} | `{old}` | `{new}` |")
    return lines


def _command(cname: str, cmd: Any) -> list[str]:
    """A command's own table: its arguments, then each flag with its default."""
    lines = ["", f"## genbench {cname}", "", _cell(cmd.help or ""), ""]
    lines += ["| flag | default | what it does |", "|---|---|---|"]
    for arg in (p for p in cmd.params if p.param_type_name == "argument"):
        name = (arg.metavar or arg.name.upper()) + (" ..." if arg.nargs == -1 else "")
        lines.append(f"| `{name}` (argument) | required | {_cell(arg.help or '')} |")
    for opt in options(cmd):
        names = " / ".join(opt.opts + opt.secondary_opts)
        names += "" if opt.is_flag or opt.count else f" {opt.metavar}"  # the value, as --help
        default = "required" if opt.required else (shown_default(opt) or "")
        text = _DEFAULT.sub("", opt.help or "")
        lines.append(f"| `{_cell(names)}` | {_cell(default)} | {_cell(text)} |")  # N|auto
    return lines


def main() -> None:
    sys.stdout.write(cli_markdown())


if __name__ == "__main__":
    main()
