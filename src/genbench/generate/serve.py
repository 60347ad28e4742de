"""`generate --serve CMD`: the job starts its engines before its preflight and keeps them.

The engines' events go beside the request log (`.genbench/engines.jsonl`, their output to
`.genbench/engines/engine-N.log`). While they load the console hears how long, and each
engine's last log line. A SIGTERM or Ctrl-C while they load (taken by `run_async`, which
cancels the job) stops them and ends the run (exit 143 or 130) before anything was sent;
the job stops its engines (waited for) however it ends.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from genbench import fmt
from genbench.engines.hs_flags import with_capture
from genbench.engines.supervisor import Supervisor
from genbench.errors import GenbenchError
from genbench.generate.hidden import clear_incoming
from genbench.transport.eventloop import signals


async def start_engines(job: Any) -> None:
    """Start the job's `--serve` engines (none: nothing to do); `job.engines` is set
    first, so that the job stops them whatever happens next."""
    cfg = job.cfg
    if not cfg.engines:
        return
    lay = job.store.layout

    def loading(name: str, waited: float, last: str) -> None:
        job.listener.note(f"{name}: loading for {fmt.duration(waited)}"
                          + (f"; its last line: {last[:160]}" if last else ""))  # fmt: skip

    engines = cfg.engines
    if cfg.capture is not None:  # vLLM's capture flags, its files in the output directory
        clear_incoming(lay.hs_incoming)
        engines = [with_capture(c, cfg.capture.layers or (), lay.hs_incoming,
                                cfg.capture.connector) for c in engines]  # fmt: skip
    job.engines = Supervisor(engines, cfg.engine, lay.engine_events, lay.engine_logs,
                             note=job.listener.note, on_down=job.engine_down,
                             on_wait=loading, on_gave_up=job.engines_gave_up)  # fmt: skip
    try:
        await job.engines.start(cfg.model)
    except asyncio.CancelledError:
        if not (stopped := signals()):  # not the operator's: someone else's cancel
            raise
        name = signal.Signals(stopped[0]).name
        raise GenbenchError(f"{name} while the engines started: stopped them, nothing was sent",
                            128 + stopped[0]) from None  # fmt: skip
