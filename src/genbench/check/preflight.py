"""Preflight: is the server alive, serving the model, and able to answer one tiny request?

Every failure becomes a `Diagnosis`: one line a person can act on and a distinct
exit code, never a traceback. `run`, `plan` and `generate` call `preflight`
before sending any load.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from genbench.check.diagnosis import (
    Diagnosis,
    PreflightFailed,
    model_diagnosis,
    request_diagnosis,
    served,
    status_diagnosis,
    transport_diagnosis,
    where,
)
from genbench.check.identity import ServerInfo, get_body, identify
from genbench.check.metric_names import dialect_of, metrics_off_hint
from genbench.check.router import ONE_WORKERS_METRICS, router_notes
from genbench.errors import ExitCode, Retry, may_come_back, retry_for
from genbench.records import ErrorKind, RequestRecord
from genbench.transport import acceptance
from genbench.transport.client import ChatRequest, Client, ConnectionPool, Timeouts
from genbench.transport.endpoint import Endpoint
from genbench.transport.failures import Failure, error_message_from_body
from genbench.transport.health import NO_HEALTH, answers
from genbench.transport.server_kind import traits
from genbench.transport.stream import share_by_chars
from genbench.transport.thinking import AUTO, DEFAULT_TAGS, NONE, ThinkMode, detect, split_text
from genbench.transport.thinking_count import ThinkingCounter
from genbench.transport.token_ids import VLLM, ask_for, asked_apart, reply_ids

Exit = ExitCode  # the exit codes of check's diagnoses are genbench's own


# a router that answers for a failed worker may route the next test request to a live one
UPSTREAM_TRIES = 3


@dataclass(frozen=True)
class CheckRetries:
    """How often the test request is sent again after a failure a retry can help (the
    errors table's `retry_for`: a 5xx once /health answers, a 429, a timeout), as a job's
    request would be (`generate --retries`, `--retry-backoff`); `check` tries once."""

    retries: int = 0
    backoff: float = 1.0
    max_backoff: float = 60.0
    why: str = ", as a request of the job would be"  # said after the count

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff, self.backoff * 2 ** (attempt - 1))


@dataclass
class MetricsProbe:
    """Is /metrics there, and in whose names? `hint` says how to turn it on when it is off."""

    status: str  # "ok", "absent" (no /metrics) or "unreadable"
    dialect: str | None = None
    http_status: int | None = None
    hint: str | None = None


@dataclass
class CheckReport:
    url: str
    ok: bool = False
    exit_code: int = Exit.OK
    diagnosis: str | None = None
    health: str | None = None
    models: list[str] = field(default_factory=list)
    model: str | None = None
    server: ServerInfo = field(default_factory=ServerInfo)
    reply: str | None = None
    thinking: bool | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    tokens_estimated: bool | None = None
    deep_health: str | None = None  # SGLang's /health_generate: "ok" or "absent"
    metrics: MetricsProbe | None = None
    # where the thinking arrives (genbench.transport.thinking: separate, inline, inline-opened,
    # none)
    # and the tags an inline split looks for
    thinking_dialect: str | None = None
    think_tags: list[str] = field(default_factory=lambda: list(DEFAULT_TAGS))
    think_dialect_set: str | None = None  # --think-dialect: the user's, not the reply's
    # who counted the thinking the server left out of usage: "estimate" (genbench, by
    # chunks or characters) or "tokenizer" (the server's /tokenize); None: the server
    reasoning_source: str | None = None
    # how this server gives the token ids it generated (genbench.transport.token_ids: vllm, sglang),
    # None when it gives none or none was asked (--token-ids off), and why not
    token_ids: str | None = None
    token_ids_note: str | None = None
    # each request's speculative acceptance: the dialect the test reply said it in
    # (genbench.transport.acceptance: vllm, sglang, sglang-meta), else how to turn it on
    acceptance: str | None = None
    acceptance_note: str | None = None
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    # the failure's kind and HTTP status, when a request failed (not written: `to_dict`)
    failed_kind: ErrorKind | None = None
    failed_status: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["failed_kind"], d["failed_status"]
        return d

    @property
    def may_come_back(self) -> bool:
        """The check failed on the server, not on the request or the configuration
        (`genbench.errors.may_come_back`): a job leaves the server out and polls it back."""
        kind = self.failed_kind
        return not self.ok and kind is not None and may_come_back(kind, self.failed_status)

    def think_mode(self) -> ThinkMode:
        """How the run that follows reads thinking: the dialect this check saw."""
        tags = (self.think_tags[0], self.think_tags[1])
        fixed = self.think_dialect_set is not None
        return ThinkMode(self.thinking_dialect or NONE, tags, fixed)


TINY_PROMPT = "Say just 'OK'."
NOT_READY = {
    "/health": "the server is up but not ready (still loading the model?)",
    # SGLang's /health_generate runs a one-token generation and answers 200 once its
    # scheduler answered (polled each second, so about a second), 503 when none came
    # within SGLANG_HEALTH_CHECK_TIMEOUT (20 s by default)
    "/health_generate": "its scheduler produced no token within SGLANG_HEALTH_CHECK_TIMEOUT "
    "(20 s by default): still starting, hung, or overloaded. Check the server's log",
}


async def _health(pool: ConnectionPool, ep: Endpoint, timeout: float, path: str = "/health") -> str:
    """'ok', 'absent' (no such path, or behind auth: /v1/models will tell), or raise
    PreflightFailed. `path` is /health or SGLang's deep /health_generate."""
    try:
        status, body = await get_body(pool, ep, ep.root + path, timeout)
    except Failure as f:
        raise PreflightFailed(transport_diagnosis(ep, f, f"GET {path}")) from None
    if status == 200:
        return "ok"
    if status in NO_HEALTH:
        return "absent"
    if status == 503:
        msg = error_message_from_body(body, limit=160)
        said = f"{where(ep)} answers {path} with 503: {NOT_READY[path]} ({msg})"
        kind = ErrorKind.HTTP_STATUS
        raise PreflightFailed(Diagnosis(kind.exit_code, said, kind=kind, http_status=503))
    raise PreflightFailed(status_diagnosis(ep, ep.root + path, status, body))


async def _models(
    pool: ConnectionPool, ep: Endpoint, timeout: float
) -> tuple[list[str], dict[str, Any]]:
    url = ep.base_url + "/models"
    try:
        status, body = await get_body(pool, ep, url, timeout)
    except Failure as f:
        raise PreflightFailed(transport_diagnosis(ep, f, "GET /v1/models")) from None
    if status != 200:
        raise PreflightFailed(status_diagnosis(ep, url, status, body))
    try:
        obj = orjson.loads(body)
        data = obj["data"]
        ids = [m["id"] for m in data]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        snippet = " ".join(body[:60].decode("utf-8", "replace").split())
        said = (
            f'{url} did not answer in the OpenAI shape (expected {{"data": [{{"id": ...}}]}}, '
            f"got {snippet!r}): is this an OpenAI-compatible server?"
        )
        raise PreflightFailed(Diagnosis(Exit.BAD_RESPONSE, said)) from None
    first = data[0] if data and isinstance(data[0], dict) else {}
    return ids, first


def pick_model(ids: list[str], wanted: str | None, url: str) -> str:
    """The model named by --model (trusted: a router may not list what its workers serve;
    the test request tells), else the only one served."""
    if wanted:
        return wanted
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise PreflightFailed(Diagnosis(Exit.MODEL, f"{url} serves no models"))
    said = f"{url} serves {len(ids)} models ({', '.join(ids)}): choose one with --model"
    raise PreflightFailed(Diagnosis(Exit.MODEL, said))


async def probe_metrics(
    pool: ConnectionPool, ep: Endpoint, kind: str | None, timeout: float
) -> MetricsProbe:
    """One GET of /metrics: in whose names, or how to turn it on. Never fails the check."""
    try:
        status, body = await get_body(pool, ep, ep.root + "/metrics", timeout)
    except Failure as f:
        return MetricsProbe("unreadable", hint=ep.redact(f.message))
    if status != 200:
        return MetricsProbe("absent", http_status=status, hint=metrics_off_hint(kind))
    names = (
        line.split("{", 1)[0].split(" ", 1)[0]
        for line in body.decode("utf-8", "replace").splitlines()
        if line and not line.startswith("#")
    )
    dialect = dialect_of(names)
    hint = None if dialect else "no metric names genbench reads: run reports no server counters"
    return MetricsProbe("ok", dialect=dialect, http_status=status, hint=hint)


async def tiny_request(client: Client) -> RequestRecord:
    req = ChatRequest(
        id="check",
        messages=[{"role": "user", "content": TINY_PROMPT}],
        max_tokens=16,
        params={"temperature": 0},
    )
    return await client.chat(req, phase="check")


async def preflight(
    ep: Endpoint,
    model: str | None = None,
    *,
    timeout: float = 120.0,
    connect_timeout: float = 3.0,
    tiny: bool = True,
    think_tags: tuple[str, str] = DEFAULT_TAGS,
    think_dialect: str = AUTO,
    token_ids: str = "auto",
    retries: CheckRetries | None = None,
) -> CheckReport:
    """Run every check; the report says what passed and, on failure, the diagnosis.
    `token_ids` (auto, on, off): whether to find out how the server gives token ids.
    `retries`: the test request is retried as a job's request would be."""
    t0 = time.perf_counter()
    forced = None if think_dialect == AUTO else think_dialect
    rep = CheckReport(url=ep.base_url, think_tags=list(think_tags), think_dialect_set=forced)
    if ep.path_assumed:
        rep.notes.append(f"no path in the URL: using {ep.base_url}")
    timeouts = Timeouts(connect=connect_timeout, read=timeout, total=timeout)
    pool = ConnectionPool(ep.root)  # the GETs and the test request share its connections
    try:
        await _checks(pool, ep, rep, model, timeouts, tiny, think_tags, token_ids, retries)
        rep.ok = True
    except PreflightFailed as pf:
        rep.exit_code, rep.diagnosis = pf.diagnosis.exit_code, pf.diagnosis.message
        rep.failed_kind, rep.failed_status = pf.diagnosis.kind, pf.diagnosis.http_status
    finally:
        await pool.close()
        rep.elapsed_s = time.perf_counter() - t0
    return rep


async def _checks(
    pool: ConnectionPool,
    ep: Endpoint,
    rep: CheckReport,
    model: str | None,
    timeouts: Timeouts,
    tiny: bool,
    think_tags: tuple[str, str],
    token_ids: str,
    retries: CheckRetries | None,
) -> None:
    """Health, models, identity, the test request: raises PreflightFailed at the first fault."""
    connect = timeouts.connect
    rep.health = await _health(pool, ep, timeout=connect + 2)
    try:
        rep.models, first = await _models(pool, ep, timeout=connect + 7)
    except PreflightFailed as pf:
        # vllm-router forwards /v1/models to its first worker, dead or not: a --model
        # given needs no listing, the test request goes to a live worker
        if not (pf.diagnosis.upstream and model):
            raise
        rep.models, first = [], {}
        rep.notes.append(f"GET /v1/models: {pf.diagnosis.message}; --model trusted")
    rep.model = pick_model(rep.models, model, ep.base_url)
    if rep.model != (first.get("id") if first else None):
        first = {}
    rep.server = await identify(pool, ep, first)
    rep.notes.extend(router_notes(rep.server.kind, rep.server.details))
    if rep.server.kind == "SGLang":
        rep.deep_health = await _health(pool, ep, min(timeouts.read, 30.0), "/health_generate")
    rep.metrics = await probe_metrics(pool, ep, rep.server.kind, connect + 2)
    if rep.metrics.status == "ok" and len(rep.server.details.get("workers") or []) > 1:
        # vllm-router forwards /metrics to one of its workers: not the sum run needs
        rep.metrics = MetricsProbe("ok", http_status=200, hint=ONE_WORKERS_METRICS)
    if tiny:
        ask, rep.token_ids_note = ask_for(rep.server.kind, token_ids)
        client = Client(
            ep, rep.model, timeouts=timeouts, session=pool, keep_text=True, token_ids=ask,
            accept=acceptance.ask_for(rep.server.kind),
        )  # fmt: skip
        rec = await _tiny_through_router(client, rep, retries)
        if ask is not None and not rec.ok and rec.http_status in range(400, 500):
            rep.token_ids_note = f"the server refused the request for ids ({rec.error_message})"
            client.token_ids = ask = None  # the test request again, without asking
            rec = await _tiny_through_router(client, rep, retries)
        if not rec.ok:
            diag = request_diagnosis(ep, rec)
            raise PreflightFailed(model_diagnosis(rep.model, rep.models, rep.url, model, diag))
        rep.thinking_dialect = rep.think_dialect_set or await _dialect(
            pool, ep, rep.model, rec, think_tags
        )
        _read_reply(rep, rec)
        if await ThinkingCounter(pool, ep, rep.model).count([rec]):  # the server left it out
            rep.reasoning_tokens, rep.reasoning_source = rec.reasoning_tokens, "tokenizer"
        _read_acceptance(rep, rec)
        if token_ids != "off":
            await _read_ids(rep, client, rec, ask)
    if rep.model not in rep.models:
        done = "but served: a router?" if tiny else "not tried (no test request)"
        listing = f"not listed by /v1/models ({served(rep.models)})"
        rep.notes.append(f"model '{rep.model}' is {listing}, {done}")


def _read_acceptance(rep: CheckReport, rec: RequestRecord) -> None:
    """Did the test reply say its speculative acceptance? If not, how to have it said."""
    if rec.spec is not None:
        rep.acceptance = rec.spec["src"]
    else:
        rep.acceptance_note = traits(rep.server.kind).acceptance_on


async def _read_ids(rep: CheckReport, client: Client, rec: RequestRecord, ask: str | None) -> None:
    """Did the test reply carry ids? A server of unknown kind is asked in a request of its
    own (vLLM's field), so one that refuses the field fails only that."""
    if ask is None and asked_apart(rep.server.kind) and rep.token_ids_note is None:
        client.token_ids = ask = VLLM
        rec = await tiny_request(client)
        if not rec.ok:
            rep.token_ids_note = f"asked with return_token_ids: {rec.error_message}"
            return
    if ask is not None:
        rep.token_ids, rep.token_ids_note = reply_ids(rec, ask)


async def _tiny_through_router(
    client: Client, rep: CheckReport, retries: CheckRetries | None
) -> RequestRecord:
    """The test request; sent again (UPSTREAM_TRIES in all) while a router answers that the
    worker it chose failed: the next may go to a live one. Any other failure is sent again
    where a job's request would be (`retries`, the errors table: a 5xx only while /health
    answers), so one passing 500 fails neither the check nor the job."""
    upstream = retried = 0
    retries = retries or CheckRetries()
    while True:
        rec = await tiny_request(client)
        if rec.ok:
            return rec
        kind = rec.error_kind or ErrorKind.OTHER
        if kind is ErrorKind.UPSTREAM:
            upstream += 1
            if upstream == UPSTREAM_TRIES:
                return rec
            rep.notes.append(f"test request {upstream}: {rec.error_message}; trying again")
            continue
        if retried >= retries.retries or not await _may_retry(client, kind, rec):
            return rec
        retried += 1
        wait = retries.delay(retried)
        rep.notes.append(
            f"test request: {rec.error_message or kind}; trying again in {wait:g} s "
            f"({retried} of {retries.retries} retries{retries.why})"
        )
        await asyncio.sleep(wait)


async def _may_retry(client: Client, kind: ErrorKind, rec: RequestRecord) -> bool:
    """The errors table's advice for the failure: a retry may help (a 5xx or a broken
    stream: if /health still answers), or it cannot (a 4xx, a server gone)."""
    if kind.server_gone:
        return False
    advice = retry_for(kind, rec.http_status)
    if advice is Retry.PROBE:
        return await answers(client.pool, client.endpoint, 5.0)
    return advice is Retry.YES


async def _dialect(
    pool: ConnectionPool, ep: Endpoint, model: str, rec: RequestRecord, tags: tuple[str, str]
) -> str:
    """Where this server's thinking arrives, from the test reply (the raw content), and
    when the reply shows no tag, from the end of the rendered prompt."""
    content = rec.text or ""
    separate = bool(rec.reasoning)
    tail = ""
    if not separate and not any(t in content for t in tags):
        tail = await prompt_tail(pool, ep, model)
    return detect(content, separate, tags, tail)


async def prompt_tail(pool: ConnectionPool, ep: Endpoint, model: str, timeout: float = 5.0) -> str:
    """The end of the test request's prompt as the chat template renders it, where the
    server can show it (vLLM: /tokenize with messages, /detokenize; SGLang's /tokenize takes
    text only, so there it cannot); else ''."""
    messages = [{"role": "user", "content": TINY_PROMPT}]
    try:
        body = {"model": model, "messages": messages, "add_generation_prompt": True}
        status, _, raw = await pool.get(ep.root + "/tokenize", timeout, ep.headers(), json=body)
        tokens = orjson.loads(raw).get("tokens") if status == 200 else None
        if not isinstance(tokens, list) or not tokens:
            return ""
        body = {"model": model, "tokens": tokens[-8:]}
        status, _, raw = await pool.get(ep.root + "/detokenize", timeout, ep.headers(), json=body)
        obj = orjson.loads(raw) if status == 200 else {}
        text = obj.get("prompt", obj.get("text"))  # vLLM says prompt, SGLang text
    except Exception:  # a probe that fails just tells us nothing
        return ""
    return text if isinstance(text, str) else ""


def _read_reply(rep: CheckReport, rec: RequestRecord) -> None:
    mode = rep.think_mode()
    thinking, answer = split_text(rec.text or "", mode)
    rep.reply = answer[:200] if mode.inline else (rec.text or "")[:200]
    rep.thinking = bool(rec.thinking_chars or rec.reasoning_tokens or thinking)
    if mode.inline and rec.completion_tokens is not None and rec.reasoning_tokens is None:
        share_by_chars(rec, len(thinking), len(answer))
        rec.reasoning = thinking  # for the server's /tokenize to count
    rep.reasoning_source = rec.reasoning_source
    rep.ttft_s, rep.e2e_s = rec.ttft, rec.e2e
    rep.finish_reason = rec.finish_reason
    rep.completion_tokens, rep.reasoning_tokens = rec.completion_tokens, rec.reasoning_tokens
    rep.tokens_estimated = rec.tokens_estimated
    if rec.tokens_estimated:
        rep.notes.append(
            "the server sent no usage in the stream: token counts are estimated from chunks"
        )
    if rep.thinking and not (answer if mode.inline else rec.answer_chars):
        rep.notes.append(
            "reasoning model: the whole short reply was thinking. Give warm-up and "
            "real requests a generous max_tokens and timeout."
        )
