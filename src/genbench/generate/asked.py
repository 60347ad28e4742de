"""The job's servers asked before its first row (each `genbench check`'s preflight, at
once): what they decide for the whole job, in one place. The model (one, or the job is
refused), which servers are up now (one that is misconfigured, not down, refuses the job),
the token ids `--token-ids` may count on, and the hidden states each server writes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from genbench.check.preflight import CheckReport, CheckRetries, preflight
from genbench.errors import GenbenchError, UsageError
from genbench.generate.hidden import Capture
from genbench.generate.jobconfig import JobConfig
from genbench.generate.servers import check_token_ids
from genbench.transport.endpoint import Endpoint


async def ask_servers(
    cfg: JobConfig,
    endpoints: tuple[Endpoint, ...],
    note: Callable[..., None],
    capture: Capture | None,
) -> tuple[list[CheckReport], str]:
    """Each server's check report, in the order of `endpoints`, and the model they serve.
    A GenbenchError (with the check's exit code) when no server can be used."""
    timeout = min(cfg.timeout, 120.0)
    think = {"think_tags": cfg.think_tags, "think_dialect": cfg.think_dialect,
             "token_ids": cfg.token_ids}  # fmt: skip
    retries = CheckRetries(cfg.retries, cfg.retry_backoff, cfg.max_backoff)  # a job's
    checks = (preflight(ep, cfg.model, timeout=timeout, connect_timeout=3.0,
                        retries=retries, **think) for ep in endpoints)  # fmt: skip
    reports = await asyncio.gather(*checks)
    for url, n in ((r.url, n) for r in reports for n in r.notes if n.startswith("test ")):
        note(f"{url}: {n}", "yellow")  # a retry said, as a row's is logged
    ok = [r for r in reports if r.ok]
    for r in reports:
        if not r.ok and not r.may_come_back:  # misconfigured, not down
            raise GenbenchError(f"{r.url}: {r.diagnosis}", r.exit_code)
    if not ok:
        first = reports[0]
        raise GenbenchError(f"{first.url}: {first.diagnosis}", first.exit_code)
    models = {r.model for r in ok}
    if len(models) > 1:
        listing = ", ".join(f"{r.url} serves {r.model}" for r in ok)
        raise UsageError(f"the servers serve different models ({listing}): choose --model")
    model = ok[0].model or ""
    check_token_ids(cfg.token_ids, ok, note)  # `on`: refuses one without
    if capture is not None:  # each server writes states genbench can read
        await capture.probe_all(ok, cfg.api_key, model, note)
    return list(reports), model
