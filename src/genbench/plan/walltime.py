"""The job, simulated: C workers per server, decoding together at the fitted step time."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from genbench.plan.draws import Draws
from genbench.plan.stepfit import StepModel


@dataclass
class JobSim:
    wall_s: float
    steady_s_per_token: float | None  # in the middle of the job, all workers busy
    last_send_s: float = 0.0  # when the last sample was sent: start-up plus the steady part


class _Workers:
    """One simulated server's workers and what they draw from the pool: the samples in the
    order they are sent, the sends themselves (a TTFT, or a failed attempt, ahead), and
    the samples done, with the steady rate measured between the job's quarter marks."""

    def __init__(
        self,
        samples: int,
        concurrency: int,
        pool: Draws,
        rng: np.random.Generator,
        order: Sequence[int] | None,
    ) -> None:
        heads = pool.heads
        if order is not None:
            self.pick = [int(i) for i in order]
            samples = len(self.pick)
        else:
            self.pick = heads[rng.integers(0, len(heads), samples + 8 * concurrency)].tolist()
        self.samples, self.concurrency = samples, concurrency
        self.next_l = pool.next_of.tolist() if pool.next_of is not None else None
        self.out_l = pool.output.tolist()
        self.prm_l = pool.prompt.tolist()
        self.ttft_l, self.first_l = pool.ttft.tolist(), pool.first_ttft.tolist()
        self.fail_l = pool.fail_s.tolist() or [0.0]
        self.f = pool.fail_rate
        self.gap = pool.gap_s
        self.rand = random.Random(int(rng.integers(0, 2**63))).random
        # (at, seq, kind, draw): kind 0 = first token, 1 = failed attempt ends
        self.wait: list[tuple[float, int, int, int]] = []
        self.seq = self.sent = self.done = self.draw = 0
        self.last_send = 0.0
        self.q1, self.q3 = samples // 4, (3 * samples) // 4
        self.mark: tuple[float, float] | None = None
        self.steady: float | None = None

    def send(self, now: float, retry: int | None) -> None:
        """A worker sends the next sample, or `retry` (a failed attempt, a next turn)."""
        self.seq += 1
        if retry is None:
            self.sent += 1
            self.last_send = now
            j = self.pick[self.draw % len(self.pick)]
            self.draw += 1
        else:
            j = retry
        rand = self.rand
        if self.f and rand() < self.f:
            fail_s = self.fail_l[int(rand() * len(self.fail_l))]
            heapq.heappush(self.wait, (now + fail_s, self.seq, 1, j))
            return
        if self.sent <= self.concurrency and retry is None:  # start-up: all C prefill at once
            ready = now + self.first_l[int(rand() * len(self.first_l))]
        else:
            ready = now + self.gap + self.ttft_l[int(rand() * len(self.ttft_l))]
        heapq.heappush(self.wait, (ready, self.seq, 0, j))

    def finish(self, t: float, j: int, tokens: float | None) -> None:
        """Request j ended at t: its sample's next turn goes out on the same worker, or the
        sample is done (marking the steady rate with the `tokens` produced so far, unless
        None) and the worker sends the next sample."""
        if self.next_l is not None and self.next_l[j] >= 0:
            self.send(t, self.next_l[j])
            return
        self.done += 1
        if tokens is not None:
            if self.done == self.q1:
                self.mark = (t, tokens)
            elif self.done == self.q3 and self.mark is not None and tokens > self.mark[1]:
                self.steady = (t - self.mark[0]) / (tokens - self.mark[1])
        if self.sent < self.samples:
            self.send(t, None)


def simulate_job(
    samples: int,
    concurrency: int,
    pool: Draws,
    step: StepModel,
    rng: np.random.Generator,
    order: Sequence[int] | None = None,
) -> JobSim:
    """Discrete-event simulation of one server running `samples` requests with C workers.

    A worker sends, waits a TTFT drawn from the pilot (the first C from the first C of
    the pilot; later ones after the measured client gap), then decodes with every other
    decoding request until its drawn length is reached, then sends the next sample. A
    failed attempt holds its worker for a drawn time and is retried. Between events the
    number decoding is constant and the context grows by n tokens per step, so the time
    to advance g steps is α·g + β·g²/2. With `order`, the samples are the pool's requests
    in that order (a replay of the pilot) instead of random draws. A sample of several
    requests (`pool.next_of`) sends its next request when one ends, on the same worker,
    like a retry (the measured gap and a later TTFT); it is done after its last."""
    a, b, c = step.a, step.b, step.c
    job = _Workers(samples, concurrency, pool, rng, order)
    samples, wait, out_l, prm_l = job.samples, job.wait, job.out_l, job.prm_l
    t = g = s_ctx = tokens = 0.0  # g: steps every decoding request has advanced since 0
    n = 0  # requests decoding, holding s_ctx + n·g context tokens
    dec: list[tuple[float, int, float, int]] = []  # (finish step, seq, context offset, j)
    for _ in range(min(concurrency, samples)):
        job.send(0.0, None)
    while job.done < samples:
        next_ev = wait[0][0] if wait else math.inf
        if n:
            alpha = a + b * n + c * (s_ctx + n * g)
            beta = c * n
            dg = dec[0][0] - g
            dt = alpha * dg + beta * dg * dg / 2 if dg > 0 else 0.0
            if t + dt <= next_ev:
                t += dt
                g = dec[0][0]
                tokens += n * max(dg, 0.0)
                while dec and dec[0][0] <= g + 1e-9:
                    _, _, off, jd = heapq.heappop(dec)
                    n -= 1
                    s_ctx -= off
                    job.finish(t, jd, tokens)
                continue
            span = next_ev - t
            dg = 2 * span / (alpha + math.sqrt(alpha * alpha + 2 * beta * span))
            g += dg
            tokens += n * dg
        if not wait:  # pragma: no cover - nothing decoding and nothing waiting
            break
        t, _, kind, j = heapq.heappop(wait)
        if kind == 1:
            job.send(t, j)
            continue
        tokens += 1  # the first token comes with prefill
        steps = out_l[j] - 1
        if steps <= 0:
            job.finish(t, j, None)
            continue
        off = prm_l[j] + 1 - g  # context = prompt + 1 + (g - g_start)
        job.seq += 1
        heapq.heappush(dec, (g + steps, job.seq, off, j))
        n += 1
        s_ctx += off
    return JobSim(t, job.steady, job.last_send)


MAX_REPEATS = 200  # simulations of one job size for the point forecast, at most


def sim_cap(concurrency: int) -> int:
    """Requests simulated one by one; longer jobs continue at the simulated steady rate."""
    return max(5000, 100 * concurrency)


def job_walls(
    per_server: Sequence[int],
    concurrency: int,
    pool: Draws,
    step: StepModel,
    rng: np.random.Generator,
    repeats: int = 1,
    capped: Capped | None = None,
    keep: list[Capped] | None = None,
    simulated: int = 0,
) -> list[float]:
    """Wall time of one server's share for each job size: simulated up to `sim_cap`, then
    the simulated steady seconds per token times the remaining samples' mean tokens. The
    capped simulation is `capped` where given (a re-plan's, kept by the plan: nothing is
    simulated for the long jobs); the one made is appended to `keep`. Each size is
    simulated `repeats` times, or as many as make `simulated` requests in all (at most
    MAX_REPEATS): one simulation draws its samples' lengths from the pilot's, and a short
    job's wall moves with the draw (±2.7% at 600 samples of lognormal σ 0.75 lengths, one
    simulation; ±1.6% averaged over three), noise of the forecast's own, not the job's."""
    cap = sim_cap(concurrency)

    def times(s: int) -> int:
        return max(repeats, min(MAX_REPEATS, math.ceil(simulated / max(s, 1))))

    mean_out = float(pool.sample_output.mean())
    walls: dict[int, float] = {}
    big = [s for s in per_server if s > cap]
    if big:
        if capped is None:
            runs = [simulate_job(cap, concurrency, pool, step, rng) for _ in range(times(cap))]
            w_cap = sum(r.wall_s for r in runs) / len(runs)
            spt = [r.steady_s_per_token for r in runs if r.steady_s_per_token]
            capped = Capped(w_cap, sum(spt) / len(spt) if spt else w_cap / (cap * mean_out))
            if keep is not None:
                keep.append(capped)
        for s in big:
            walls[s] = capped.wall_s + (s - cap) * mean_out * capped.s_per_token
    for s in per_server:
        if s not in walls:
            runs = [simulate_job(s, concurrency, pool, step, rng) for _ in range(times(s))]
            walls[s] = sum(r.wall_s for r in runs) / len(runs)
    return [walls[s] for s in per_server]


@dataclass(frozen=True)
class Capped:
    """A long job's first `sim_cap` samples simulated: their wall time and the steady
    seconds per output token the rest continues at."""

    wall_s: float
    s_per_token: float
