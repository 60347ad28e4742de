"""`genbench run` as one function: the target (the server at --url, the servers of
--versus, or the local demo), one run or its repeats, every result on disk as it comes.
The command renders what `run_benchmark` returns (`genbench.run.render.print_outcome`)."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Coroutine
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from genbench.errors import ExitCode, GenbenchError
from genbench.redact import redact
from genbench.run.benchmark import RunListener, RunState, execute_run
from genbench.run.result import default_out_dir
from genbench.run.runconfig import RunConfig
from genbench.transport.endpoint import Endpoint, endpoint
from genbench.transport.eventloop import run_async

T = TypeVar("T")
LOCAL_NOTE = (
    "[yellow]no --url: starting the local demo target (llama.cpp, tiny "
    "random-weight model built by genbench)[/]"
)


class RunInterrupted(GenbenchError):
    """Ctrl-C during the run: what was measured is saved."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, out: Path, stop: BaseException | None = None) -> None:
        super().__init__(
            f"partial results saved in {out}", getattr(stop, "exit_code", ExitCode.INTERRUPTED)
        )


@dataclass
class RunOutcome:
    """What ran: each (label, endpoint, directory) target and its runs (one, or its
    repeats), under `out`."""

    out: Path
    targets: list[tuple[str, Endpoint, Path]]
    states: list[list[RunState]]
    repeats: int
    repeated: bool

    @property
    def dirs(self) -> list[Path]:
        return [d for _, _, d in self.targets]

    def to_json(self) -> dict[str, Any]:
        """One run's result document; repeats: each side's directory and its documents."""
        if not self.repeated:
            return self.states[0][0].doc
        return {
            "sides": [
                {"label": label or None, "dir": str(d), "repeats": [s.doc for s in states]}
                for (label, _, d), states in zip(self.targets, self.states, strict=True)
            ]
        }


def run_benchmark(
    urls: list[str],
    model: str | None,
    keys: tuple[str, Path | None],
    cfg: RunConfig,
    repeats: int,
    out_dir: Path | None,
    listener: RunListener,
    repeated: bool,
) -> RunOutcome:
    """The run on `urls` (none: the local demo target, started here and stopped after).
    Repeated (`--repeat N`, `--versus URL`): the whole run N times per server, servers
    alternating, OUT/repeat-i, or OUT/a/repeat-i and OUT/b/repeat-i for several servers."""
    ctx: AbstractContextManager[Any] = nullcontext()
    extra: dict[str, Any] = {}
    if not urls:
        from genbench.local.llamacpp import LocalLlamaServer

        listener.say(LOCAL_NOTE)
        ctx = LocalLlamaServer(n_parallel=max(cfg.concurrency))
        extra["local_demo"] = True
    with ctx as server:
        eps = [endpoint(u, *keys) for u in (urls or [server.base_url])]
        out = out_dir or default_out_dir(model or ("local" if not urls else None))
        if not repeated:
            targets = [("", eps[0], out)]
            wl = f" (workload {cfg.prompts})" if cfg.prompts else ""
            listener.say(f"[bold]genbench run[/] {eps[0].base_url} → {out}{wl}")
            state = _drive(execute_run(eps[0], model, cfg, out, listener, extra), listener, out)
            return RunOutcome(out, targets, [[state]], 1, False)
        from genbench.run.repeats import execute_repeats

        labels = [chr(ord("a") + i) for i in range(len(eps))] if len(eps) > 1 else [""]
        targets = [
            (label, ep, out / label if label else out)
            for label, ep in zip(labels, eps, strict=True)
        ]
        for _, ep, d in targets:
            wl = f" (workload {cfg.prompts})" if cfg.prompts else ""
            listener.say(f"[bold]genbench run[/] {ep.base_url} → {d}/repeat-1 … {repeats}{wl}")
        coro = execute_repeats(targets, model, cfg, repeats, listener, extra)
        sides = _drive(coro, listener, out)
    return RunOutcome(out, targets, sides, repeats, True)


def run_served(
    texts: list[str],
    model: str | None,
    keys: tuple[str, Path | None],
    cfg: RunConfig,
    out_dir: Path | None,
    listener: RunListener,
    start_timeout: float,
    on_wait: Any = None,
) -> RunOutcome:
    """`run --serve A --serve B …`: each configuration started, warmed, measured and
    stopped, one at a time (one GPU box holds one engine), into OUT (one) or OUT/a, OUT/b
    (several: `plan --from OUT` decides between them); the engine's log beside its result."""
    from genbench.engines.start import serving

    out = out_dir or default_out_dir(model)
    labels = [chr(ord("a") + i) for i in range(len(texts))] if len(texts) > 1 else [""]
    targets: list[tuple[str, Endpoint, Path]] = []
    states: list[list[RunState]] = []
    for label, text in zip(labels, texts, strict=True):
        d = out / label if label else out
        shown = shlex.quote(redact(text)).replace("[", "\\[")  # said through markup: brackets kept
        listener.say(f"[bold]genbench run --serve[/] {shown} → {d}")
        with serving([text], d, start_timeout, on_wait, keys) as cmds:
            ep = endpoint(cmds[0].url, *keys)
            doc = {"engine": redact(text)}
            state = _drive(execute_run(ep, model, cfg, d, listener, doc), listener, d)
        targets.append((label, ep, d))
        states.append([state])
    return RunOutcome(out, targets, states, 1, len(texts) > 1)


def _drive(coro: Coroutine[Any, Any, T], listener: RunListener, out: Path) -> T:
    """Run the measurement; on Ctrl-C stop the live display and say where the results are."""
    try:
        return run_async(coro)
    except (KeyboardInterrupt, asyncio.CancelledError) as e:
        listener.stopped()
        raise RunInterrupted(out, e) from None
    finally:
        listener.stopped()
