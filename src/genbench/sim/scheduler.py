"""The sim's scheduler: continuous batching on absolute deadlines (docs/sim.md)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from collections import deque
from typing import Any

import orjson

from genbench.sim import ids, spec
from genbench.sim.config import SimConfig
from genbench.sim.dialect import DIALECTS, Usage
from genbench.sim.kv import KVCache
from genbench.sim.replies import (
    DONE,
    INF,
    MALFORMED,
    MAX_CATCH_UP,
    MID,
    ROLE,
    SUF,
    TEXT,
    Req,
    Vocab,
    clock,
    sleep_until,
)

# SGLang's scheduler logs (and sets its acceptance gauges) every --decode-log-interval
# decode steps, 40 by default; the sim's SGLang dialect does the same
SPEC_LOG_STEPS = 40


class Scheduler:
    """Continuous batching on absolute deadlines, plus the counters /metrics shows."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.loop = asyncio.get_running_loop()
        self.vocab = Vocab(max(cfg.spec_k, 64), TEXT)
        self.running = 0
        self.waiting: deque[Req] = deque()
        self.kv = KVCache(cfg.kv_tokens)
        self.batch: list[Req] = []
        self.joining: list[Req] = []
        self._wake: asyncio.Future[float] | None = None
        self.rng = random.Random(f"{cfg.seed}/spec")
        self.steps = 0
        self.busy_s = 0.0  # the decode steps' scheduled seconds: the job's time on the sim's clock
        self.resyncs = 0
        self.resync_s = 0.0
        self.lag_sum = 0.0
        self.lag_max = 0.0
        self.first_lag_sum = 0.0  # how late first tokens were written, summed
        self.m_gen = 0
        self.m_prompt = 0
        self.m_reason = 0
        self.m_success = {"stop": 0, "length": 0}
        self.m_drafts = 0
        self.m_draft_tokens = 0
        self.m_accepted = 0
        self.m_aborted = 0  # requests whose client went away (SGLang's aborted requests)
        self.m_tool_calls = 0  # replies that were a tool call
        # acceptance over the last SPEC_LOG_STEPS decode steps, as SGLang's gauges show it
        self.spec_accept_length = 0.0
        self.spec_accept_rate = 0.0
        self._spec_mark = (0, 0, 0)
        self.usage_shape: Usage = DIALECTS[cfg.dialect].usage
        self.drift = cfg.drift_model()
        self.started = clock()
        self.task = self.loop.create_task(self._run())

    def speed(self, t: float) -> float:
        """--drift: the speed multiplier at time t (1 without drift); steps and prefill take
        their nominal time divided by it."""
        return 1.0 if self.drift is None else self.drift.factor(t - self.started)

    # -- admission ------------------------------------------------------------------------

    async def admit(self, r: Req) -> float:
        """Wait for a batch slot (and, with a KV cache, room for the request's prompt and
        the tokens it must generate again); return the (virtual) time it was granted. A
        preempted request was put back at the queue's head by `_preempt`: it waits there."""
        if r.grant is None:
            if not self.waiting and self._room(r):
                self._grant(r)
                return clock()
            r.grant = self.loop.create_future()
            self.waiting.append(r)
        fut = r.grant
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(r, clock())
            else:
                with contextlib.suppress(ValueError):
                    self.waiting.remove(r)
            raise
        finally:
            r.grant = None

    def num_waiting(self) -> int:
        return sum(1 for r in self.waiting if r.grant is not None and not r.grant.done())

    def _room(self, r: Req) -> bool:
        return self.running < self.cfg.max_batch and self.kv.fits(r.prompt_tokens + r.redo)

    def _grant(self, r: Req) -> None:
        self.running += 1
        r.released = False
        self.kv.hold(r, r.prompt_tokens)

    def _admit_waiting(self, t: float) -> None:
        """Admit from the queue's head while there is room (first come, first served: a
        head that does not fit holds the others back, as vLLM's scheduler does)."""
        while self.waiting:
            r = self.waiting[0]
            if r.grant is None or r.grant.done():  # its client went away while queued
                self.waiting.popleft()
                continue
            if not self._room(r):
                return
            self.waiting.popleft()
            self._grant(r)
            r.grant.set_result(t)

    def set_kv_tokens(self, tokens: int) -> None:
        """A new capacity (POST /sim/kv): the next step preempts if it no longer fits."""
        self.kv.capacity = tokens
        self._admit_waiting(clock())

    def release(self, r: Req, t: float) -> None:
        if not r.released:
            r.released = True
            self.running -= 1
            self.kv.drop(r)
            self._admit_waiting(t)

    def _preempt(self, victims: list[Req], t: float) -> None:
        """Out of the batch and the cache, back to the queue's head: each will generate its
        tokens again (silently) once admitted back, its time lost."""
        for r in victims:
            r.released = True
            self.running -= 1
            self.kv.drop(r)
            self.kv.preemptions += 1
            r.redo = r.emitted
            r.preempted = True
            r.grant = self.loop.create_future()
            self.waiting.appendleft(r)
            done, r.done = r.done, self.loop.create_future()
            done.set_result(None)
        self._admit_waiting(t)

    # -- request life ---------------------------------------------------------------------

    def start_decode(self, r: Req, t: float) -> None:
        """Prefill has ended at `t`: emit the first token now, then join the batch."""
        self.m_prompt += r.prompt_tokens
        if r.stream and not r.sink.write(r.head + self._first(r)):  # type: ignore[union-attr]
            self.drop(r, t)
            return
        if self._advance(r, 1, t):
            self.join(r, t)

    @staticmethod
    def _first(r: Req) -> bytes:
        """The first chunk's tail: vLLM's carries the prompt's ids when asked."""
        return ROLE if r.ids != "vllm" else ids.first_chunk_tail(r.prompt_ids)

    def join(self, r: Req, t: float) -> None:
        if r.dead:
            return
        if r.emitted >= r.total and not r.released:  # stalled right before the end
            self._finish(r, t)
            return
        self.joining.append(r)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(t)

    def _emit(self, r: Req, k: int) -> bool:
        """Account (and for streams, write) tokens [emitted, emitted + k)."""
        e = r.emitted
        th = r.thinking
        r.emitted = e + k
        self.m_gen += k
        r.kv += k
        self.kv.used += k
        if e < th:
            nr = min(k, th - e)
            r.thinking_emitted += nr
            self.m_reason += nr
        if not r.stream:
            return True
        if r.tool is not None:
            events = r.tool.events(r.head, e, e + k, r.ids == "vllm")
            return r.sink.write(events)  # type: ignore[union-attr]
        if r.script is not None:
            out = b""
            tail = SUF[2:]
            if r.ids == "vllm":  # the chunk's ids go with its first delta
                word = r.script.word
                chunk_ids = orjson.dumps([ids.word_id(word(i)) for i in range(e, e + k)])
                tail = b',"finish_reason":null,"token_ids":' + chunk_ids + b"}]}\n\n"
            for think, answer in r.script.deltas(e, e + k):
                delta = {self.cfg.reasoning_dialect: think} if think else {}
                if answer:
                    delta["content"] = answer
                out += r.head + orjson.dumps(delta) + tail
                tail = SUF[2:]
            return r.sink.write(out)  # type: ignore[union-attr]
        span = self.vocab.span
        suf = SUF if r.ids != "vllm" else ids.IDS_SUF + ids.text_ids(r.pos + e, k) + ids.IDS_END
        if e >= th:
            body = r.pre_c + span(r.pos + e, k) + suf
        elif e + k <= th:
            body = r.pre_r + span(r.pos + e, k) + suf
        else:
            body = r.pre_r + span(r.pos + e, th - e) + MID + span(r.pos + th, e + k - th) + suf
        return r.sink.write(body)  # type: ignore[union-attr]

    def _advance(self, r: Req, k: int, t: float) -> bool:
        """Emit up to k tokens at time t; True while the request stays in the batch. A verify
        step (k > 0 after the first token) is tallied before the request can finish."""
        if r.emitted == r.event_at and not self._events(r, t):
            return False
        rem = r.total - r.emitted
        if k > rem:
            k = rem
        room = r.event_at - r.emitted
        if k > room:
            k = room
        if not self._emit(r, k):
            self.drop(r, t)
            return False
        if r.spec is not None and 0 < k < r.emitted:  # not the prefill's token: a verify step
            r.spec.step(k - 1, self.cfg.spec_k - 1)
        if r.emitted == r.event_at and not self._events(r, t):
            return False
        if r.emitted >= r.total:
            self._finish(r, t)
            return False
        return True

    def _events(self, r: Req, t: float) -> bool:
        """Apply the faults due after `r.emitted` tokens; True if the request decodes on."""
        stall = 0.0
        while r.events and r.events[-1][0] == r.emitted:
            _, f = r.events.pop()
            if f.kind == "malformed":
                if r.stream:
                    r.sink.write(MALFORMED)  # type: ignore[union-attr]
                else:
                    r.malformed = True
            elif f.kind == "stall-mid":
                stall += f["seconds"]
            elif f.kind == "inband-error":
                r.error_message = f["message"]
                if r.stream:
                    err = {"error": {"message": f["message"], "type": "InternalServerError",
                                     "code": 500}}  # fmt: skip
                    r.sink.write(b"data: " + orjson.dumps(err) + b"\n\n")  # type: ignore[union-attr]
                self._end(r, "inband-error", t)
                return False
            elif f.kind == "truncate":
                self._end(r, "truncate", t)
                return False
        r.event_at = r.events[-1][0] if r.events else INF
        if stall > 0:
            self.loop.call_later(max(0.0, t + stall - clock()), self.join, r, t + stall)
            return False
        return True

    def _finish(self, r: Req, t: float) -> None:
        finish = r.finish
        if r.stream:
            out = r.head + b'{},"finish_reason":"' + finish.encode() + b'"}]}\n\n'
            head = {"id": r.id, "object": "chat.completion.chunk", "created": r.created,
                    "model": self.cfg.model}  # fmt: skip
            said = spec.said(r, self.cfg.dialect, r.emitted)
            if r.ids == "sglang" or (said and said[0] == "sglext"):  # once, before the usage
                ext = said[1] if said else {}
                out += ids.sglext_chunk(head, r.prompt_ids, ids.generated(r), ext, r.ids)
            if r.usage_chunk_ok:
                usage = {**head, "choices": [], "usage": self.usage(r)}
                if said and said[0] == "metrics":  # vLLM: on the usage chunk alone
                    usage["metrics"] = said[1]
                out += b"data: " + orjson.dumps(usage) + b"\n\n"
            if not r.sink.write(out + DONE):  # type: ignore[union-attr]
                self.drop(r, t)
                return
        self.m_success[finish] = self.m_success.get(finish, 0) + 1  # tool_calls, once seen
        self.m_tool_calls += r.tool is not None
        self._end(r, "ok", t)

    def usage(self, r: Req) -> dict[str, Any]:
        # the inline-think fault's count=0: usage leaves thinking uncounted (vLLM, no parser);
        # uncounted-think: so does a server that split it (llama.cpp's reasoning format)
        counted = (r.script is None or r.script.count) and not r.uncounted
        return self.usage_shape(
            r.prompt_tokens, r.emitted, r.thinking_emitted if counted else None
        )

    def _end(self, r: Req, outcome: str, t: float) -> None:
        r.outcome = outcome
        r.dead = True
        self.release(r, t)
        if not r.done.done():
            r.done.set_result(None)

    def drop(self, r: Req, t: float) -> None:
        """The client went away (or the handler was cancelled): free the slot."""
        if not r.dead:
            self.m_aborted += 1
            self._end(r, "gone", t)

    def _log_spec(self) -> None:
        """Acceptance over the steps since the last call: the mean tokens per verify step
        (the bonus token included) and the accepted share of the draft tokens."""
        drafts, accepted, draft_tokens = self._spec_mark
        d, a = self.m_drafts - drafts, self.m_accepted - accepted
        dt = self.m_draft_tokens - draft_tokens
        self.spec_accept_length = 1.0 + a / d if d else 0.0
        self.spec_accept_rate = a / dt if dt else 0.0
        self._spec_mark = (self.m_drafts, self.m_accepted, self.m_draft_tokens)

    # -- the decode loop ------------------------------------------------------------------

    async def _run(self) -> None:
        cfg = self.cfg
        a, b, k_spec = cfg.step_a, cfg.step_b, cfg.spec_k
        rnd = self.rng.random
        base = clock()
        while True:
            if not self.batch and not self.joining:
                self._wake = self.loop.create_future()
                base = await self._wake
                self._wake = None
            if self.joining:
                self.batch.extend(r for r in self.joining if not r.dead)
                self.joining.clear()
            if victims := self.kv.victims(self.batch, k_spec):
                gone = set(map(id, victims))
                self.batch = [r for r in self.batch if id(r) not in gone]
                self._preempt(victims, base)
            batch = self.batch
            dur = (a + b * len(batch)) / self.speed(base)
            self.busy_s += dur
            deadline = base + dur
            await sleep_until(deadline)
            keep: list[Req] = []
            for r in batch:
                if r.dead:
                    continue
                if r.redo:  # generating again what a preemption threw away: nothing sent
                    n = min(k_spec, r.redo)
                    r.redo -= n
                    r.kv += n
                    self.kv.used += n
                    self.kv.redone += n
                    keep.append(r)
                    continue
                k = k_spec
                if k > 1 and r.accept < 1.0:
                    p_acc = r.accept
                    k = 1 + sum(1 for _ in range(k_spec - 1) if rnd() < p_acc)
                before = r.emitted
                try:
                    alive = self._advance(r, k, deadline)
                except Exception as exc:  # one broken stream must not stop the batch
                    print(f"genbench sim: stream failed: {exc!r}", file=sys.stderr)
                    self.drop(r, deadline)
                    alive = False
                if k_spec > 1:
                    self.m_drafts += 1
                    self.m_draft_tokens += k_spec - 1
                    self.m_accepted += max(0, r.emitted - before - 1)
                if alive:
                    keep.append(r)
            self.batch = keep
            self.steps += 1
            if k_spec > 1 and self.steps % SPEC_LOG_STEPS == 0:
                self._log_spec()
            lag = clock() - deadline
            self.lag_sum += lag
            if lag > self.lag_max:
                self.lag_max = lag
            # Late by a little (a busy host): keep the absolute schedule, so the next steps
            # catch up and the mean rate stays exact. Late by more than a step and more
            # than MAX_CATCH_UP: resynchronise rather than burst a backlog of tokens.
            if lag > MAX_CATCH_UP and lag > a + b * len(keep):
                base = deadline + lag
                self.resyncs += 1
                self.resync_s += lag
            else:
                base = deadline
