"""What one pilot says about the job: its requests, the server's fitted step time, how well
that model replays the pilot, and how the server's speed moved during it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from genbench.errors import UsageError
from genbench.generate.wander import SpeedWander
from genbench.plan.draws import Draws
from genbench.plan.stepfit import DecodeRows, StepModel, decode_rows, fit_step
from genbench.plan.walltime import simulate_job
from genbench.records import RequestRecord
from genbench.stats import dist, summarize

REPLAYS = 5  # simulations of the pilot itself, averaged, for the model's own error
SPEED_BATCHES = 10  # stretches of the pilot for the speed's batch means


def speed_stretches(rows: DecodeRows, step: StepModel) -> list[float]:
    """Measured over fitted decode seconds in each of SPEED_BATCHES stretches of
    consecutive requests (empty when the pilot is too short to cut)."""
    m = min(SPEED_BATCHES, len(rows.y) // 5)
    if m < 3:
        return []
    pred = rows.x @ np.array([step.a, step.b, step.c])
    return [float(rows.y[b].sum() / pred[b].sum()) for b in rows.blocks(m)]


def stretch_seconds(rows: DecodeRows, count: int) -> float:
    """The seconds one of `count` stretches spans: the time from the first decode start to
    the last, shared out (0 without stretches)."""
    if count < 1 or not len(rows.start):
        return 0.0
    return float(rows.start.max() - rows.start.min()) / count


@dataclass
class PilotModel:
    """Everything the forecast needs, learned from one pilot at concurrency C."""

    concurrency: int
    pool: Draws
    rows: DecodeRows
    step: StepModel
    pilot_requests: int
    pilot_wall_s: float
    pilot_steady_tps: float | None
    replay_s: float = 0.0  # the fitted model simulating the pilot itself: its wall time
    replay_send_s: float = 0.0  # and when it sent the last request
    pilot_send_s: float = 0.0  # when the pilot really sent its last request
    stretches: list[float] = field(default_factory=list)  # speed_stretches of the fit
    stretch_s: float = 0.0  # the seconds one of them spans
    pilot_samples: int = 0  # rows sent (requests, when the records do not name rows)

    @property
    def calibration(self) -> float:
        """The factor that makes the simulation run the pilot as fast as the server did:
        the pilot's wall time over the replay's (its own requests, in order). The step
        fit is exact on the sim; what it leaves on a real server (and on steps that emit
        several tokens at once) is systematic, and the job at the same C and lengths has
        it too. Over the whole pilot, not to its last send only: a short pilot's last
        send comes after its first wave, whose start-up (C prefills at once, fresh
        connections) then set the speed of the whole job (+2% on a 60-row pilot of fixed
        lengths at C = 32, benchmarks/README.md); the whole pilot holds it once, as the
        job does. To the last send where the replay has no wall (an empty replay)."""
        if self.replay_s > 0 and self.pilot_wall_s > 0:
            return self.pilot_wall_s / self.replay_s
        if self.replay_send_s <= 0 or self.pilot_send_s <= 0:
            return 1.0
        return self.pilot_send_s / self.replay_send_s

    @property
    def wander(self) -> SpeedWander:
        """How the server's speed moved during the pilot: its decoding cut into
        SPEED_BATCHES stretches of consecutive requests, each stretch's decode seconds over
        the fitted model's (a slow stretch is above 1), their semivariogram fitted (see
        `SpeedWander`); the job's range carries it over the job's length."""
        return SpeedWander.fit([1 / x for x in self.stretches if x > 0], self.stretch_s)

    @property
    def replay_err(self) -> float:
        """The calibrated simulation's error on the part of the pilot it can be checked
        on apart: the pilot replayed with its own requests in the order they were sent,
        up to its last send (start-up and the part where all C workers are busy), against
        the real time to it. The calibration makes the whole pilot right; what is left
        between its parts (a short pilot's start-up, the tail's misfit) the model does
        not capture, and the bar includes it."""
        if self.pilot_send_s <= 0 or self.replay_send_s <= 0:
            return 0.0
        return self.replay_send_s * self.calibration / self.pilot_send_s - 1

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord], concurrency: int) -> PilotModel:
        sent = [r for r in records if r.t_send]
        if not sent:
            raise UsageError("the pilot sent no request")
        pool = Draws.from_records(records, concurrency)
        rows = decode_rows(records, concurrency)
        s = summarize(records, concurrency=concurrency, sustained=True)
        step = fit_step(rows)
        stretches = speed_stretches(rows, step)
        t0 = min(r.t_send for r in sent)
        wall = max(r.t_end or r.t_send for r in sent) - t0
        rng = np.random.default_rng(0)
        sims = [
            simulate_job(0, concurrency, pool, step, rng, order=pool.order) for _ in range(REPLAYS)
        ]
        return cls(
            concurrency,
            pool,
            rows,
            step,
            len(sent),
            wall,
            s.steady_tps,
            float(np.mean([j.wall_s for j in sims])),
            float(np.mean([j.last_send_s for j in sims])),
            max(r.t_send for r in sent) - t0,
            stretches,
            stretch_seconds(rows, len(stretches)),
            len({r.extra["row"] for r in sent if r.extra and "row" in r.extra}) or len(sent),
        )

    def describe(self) -> dict[str, Any]:
        p = self.pool
        return {
            "concurrency": self.concurrency,
            "pilot_requests": self.pilot_requests,
            "pilot_ok": len(p.output),
            "pilot_samples": self.pilot_samples,
            "requests_per_sample": len(p.output) / len(p.heads),
            "pilot_wall_s": self.pilot_wall_s,
            "pilot_steady_tps": self.pilot_steady_tps,
            "output_tokens": dist(p.sample_output.tolist()),
            "thinking_tokens": dist(p.per_sample(p.thinking).tolist()),
            "thinking_estimated_requests": p.thinking_estimated,
            "thinking_counted_requests": p.thinking_counted,
            "prompt_tokens": dist(p.per_sample(p.prompt).tolist()),
            "ttft_s": dist(p.ttft.tolist()),
            "first_ttft_s": dist(p.first_ttft.tolist()),
            "fail_rate": p.fail_rate,
            "step_model": {
                **asdict(self.step),
                "formula": "seconds per decode step = a + b·n_decoding + c·context_tokens",
                "decode_tps_at_c": self.step.rate(
                    self.concurrency,
                    self.concurrency * float(np.mean(p.prompt) + np.mean(p.output) / 2),
                ),
            },
            "speed": self.describe_speed(),
            "replay": {
                "what": "the fitted model simulating the pilot itself, its requests in order: "
                "calibrated on its whole time, its error to the last send",
                "simulated_s": self.replay_s,
                "calibrated_s": self.replay_s * self.calibration,
                "actual_s": self.pilot_wall_s,
                "simulated_last_send_s": self.replay_send_s,
                "calibrated_last_send_s": self.replay_send_s * self.calibration,
                "actual_last_send_s": self.pilot_send_s,
                "calibration": self.calibration,
                "error": self.replay_err,
            },
        }

    def describe_speed(self) -> dict[str, Any]:
        """The pilot's speed stretches and the fit the range carries over the job."""
        w = self.wander
        return {
            "what": "decode seconds over the fitted model's, in stretches of consecutive "
            "requests (above 1: slower than fitted)",
            "stretches": self.stretches,
            "stretch_s": self.stretch_s,
            "moved": w.moved,
            "lag1": w.lag1,
            "semivariogram": list(w.gamma),
            "noise": w.noise,
            "growth": w.growth,
            "exponent": w.exponent,
            "horizon_s": w.horizon * w.pilot_s,
        }
