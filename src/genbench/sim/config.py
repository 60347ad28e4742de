"""What the reference server simulates: timing, output lengths and injected faults.

Everything here is plain data validated up front, so a bad flag fails before a
port is bound, with one line that names the value and what was expected.
`SimConfig.to_dict` is served at `GET /sim/config` so that tests compute the
true rates from the running server instead of repeating its flags.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from genbench.errors import UsageError

REASONING_DIALECTS = ("reasoning_content", "reasoning")
# whose endpoints and metric names the sim serves (genbench.sim.dialect has each one's table)
SERVER_DIALECTS = ("sim", "sglang", "vllm")
# how the sim gives token ids when asked (genbench.sim.ids): none (llama.cpp), vLLM's, SGLang's
TOKEN_ID_DIALECTS = ("none", "vllm", "sglang")
# what `auto` means for each dialect: the ids and the thinking field that engine gives
AUTO_IDS = {"sim": "none", "sglang": "sglang", "vllm": "vllm"}
AUTO_REASONING = {"sim": "reasoning_content", "sglang": "reasoning_content", "vllm": "reasoning"}
SOME_THINKING_ONLY = 0.01  # replies that are thinking only, above this share: a warning

# Fault kinds and the keys each accepts besides `rate` and `after`, with defaults.
FAULT_KEYS: dict[str, dict[str, Any]] = {
    "refuse": {},
    "die": {},
    "http": {"status": 500, "message": ""},
    "stall-first": {"seconds": 1.0},
    "stall-mid": {"seconds": 1.0, "at": 10},
    "inband-error": {"at": 10, "message": "injected in-band error"},
    "malformed": {"at": 10},
    "truncate": {"at": 10},
    "no-usage": {},
    "bad-acceptance": {},  # says 10 x the drafts + 7 accepted: figures that cannot be
    "no-ids": {},
    "not-openai": {},
    "unhealthy": {},
    "no-tools": {},
    "split": {"min": 1, "max": 64, "pause_ms": 0.0},
    # faults in what is said, not in how: the rows inspect must find (docs/inspect.md)
    "loop": {"at": 20, "period": 8},
    "unclosed": {},
    "empty-answer": {},
    "inline-think": {"cut": -1, "opened": 0, "count": 1},
    "uncounted-think": {},  # thinking in its own field, left out of usage (llama.cpp)
    "garble": {"at": 10},
    "ignore-prompt": {},
}
# kinds that change the text or length of an answer; a request with one takes the slow path
TEXT_FAULTS = ("loop", "unclosed", "empty-answer", "inline-think", "garble", "ignore-prompt")


@dataclass(slots=True)
class Fault:
    """One `--fault` spec. `rate` is per request; `after` skips the first N requests;
    `match` (when set) limits it to chat requests whose body contains that text, so a test
    chooses the rows a fault hits by a marker in their prompts."""

    kind: str
    rate: float = 1.0
    after: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    match: str = ""

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    def to_dict(self) -> dict[str, Any]:
        extra = {"match": self.match} if self.match else {}
        return {"kind": self.kind, "rate": self.rate, "after": self.after, **extra, **self.params}


def _num(spec: str, key: str, raw: str, kind: type, lo: float, hi: float = math.inf) -> Any:
    try:
        value = kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise UsageError(f"--fault {spec!r}: {key}={raw!r} is not {what}") from None
    if not (lo <= value <= hi) or (kind is float and not math.isfinite(value)):
        rng = f">= {lo:g}" if hi == math.inf else f"in [{lo:g}, {hi:g}]"
        raise UsageError(f"--fault {spec!r}: {key}={raw} must be {rng}")
    return value


# key -> (type, lowest, highest)
_FAULT_KEY_TYPES: dict[str, tuple[type, float, float]] = {
    "rate": (float, 0.0, 1.0),
    "after": (int, 0, math.inf),
    "until": (int, 1, math.inf),  # the requests after the until-th are spared
    "status": (int, 400, 599),
    "seconds": (float, 0.0, math.inf),
    "at": (int, 0, math.inf),
    "min": (int, 1, math.inf),
    "max": (int, 1, math.inf),
    "pause_ms": (float, 0.0, math.inf),
    "period": (int, 1, math.inf),
    "cut": (int, -1, 8),  # inline-think: characters of </think> before the cut
    "opened": (int, 0, 1),
    "count": (int, 0, 1),
}
COMMON_KEYS = ("rate", "after", "until", "match")


def parse_fault(spec: str) -> Fault:
    """Parse `KIND[:key=value,...]`, e.g. `http:status=503,rate=0.5`."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip()
    if kind not in FAULT_KEYS:
        raise UsageError(
            f"--fault {spec!r}: unknown kind {kind!r}; expected one of {', '.join(FAULT_KEYS)}"
        )
    allowed = FAULT_KEYS[kind]
    fault = Fault(kind=kind, params=dict(allowed))
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not eq:
            raise UsageError(f"--fault {spec!r}: expected key=value, got {item!r}")
        if key not in allowed and key not in COMMON_KEYS:
            keys = ", ".join([*allowed, *COMMON_KEYS])
            raise UsageError(f"--fault {spec!r}: unknown key {key!r} for {kind}; expected {keys}")
        if key == "message":
            fault.params[key] = raw
            continue
        if key == "match":
            if not raw:
                raise UsageError(f"--fault {spec!r}: match= needs a text to look for")
            fault.match = raw
            continue
        value = _num(spec, key, raw, *_FAULT_KEY_TYPES[key])
        if key == "rate":
            fault.rate = value
        elif key == "after":
            fault.after = value
        else:
            fault.params[key] = value
    if kind == "stall-mid" and fault["at"] < 1:
        raise UsageError(f"--fault {spec!r}: at must be >= 1 (use stall-first before token 1)")
    if kind == "split" and fault["min"] > fault["max"]:
        raise UsageError(f"--fault {spec!r}: min={fault['min']} must be <= max={fault['max']}")
    return fault


@dataclass(frozen=True, slots=True)
class OutputLen:
    """The natural (end-of-sequence) output length distribution of `--output-len`."""

    kind: str
    a: float
    b: float = 0.0

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(1, round(rng.lognormvariate(math.log(self.a), self.b)))


def parse_output_len(spec: str) -> OutputLen:
    """Parse `fixed:N`, `uniform:LO:HI` or `lognormal:MEDIAN:SIGMA`."""
    parts = spec.strip().split(":")
    expected = "expected fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA"
    arity = {"fixed": 2, "uniform": 3, "lognormal": 3}
    if parts[0] not in arity or len(parts) != arity[parts[0]]:
        raise UsageError(f"--output-len {spec!r}: {expected}")
    try:
        if parts[0] == "fixed":
            n = int(parts[1])
            if n < 1:
                raise UsageError(f"--output-len {spec!r}: N must be >= 1")
            return OutputLen("fixed", n)
        if parts[0] == "uniform":
            lo, hi = int(parts[1]), int(parts[2])
            if not 1 <= lo <= hi:
                raise UsageError(f"--output-len {spec!r}: need 1 <= LO <= HI")
            return OutputLen("uniform", lo, hi)
        median, sigma = float(parts[1]), float(parts[2])
    except ValueError:
        raise UsageError(f"--output-len {spec!r}: {expected}, with numbers") from None
    if not (median > 0 and sigma >= 0 and math.isfinite(median) and math.isfinite(sigma)):
        raise UsageError(f"--output-len {spec!r}: need MEDIAN > 0 and SIGMA >= 0")
    return OutputLen("lognormal", median, sigma)


# --- drift: the server's speed wandering between runs (--drift) -------------------------


@dataclass(frozen=True, slots=True)
class Drift:
    """`--drift PCT:PERIOD`: the server's speed times 1 + PCT/100 · sin(2π·t/PERIOD + phase).

    Real servers on shared hosts run ±10% faster or slower from one run to the next
    (benchmarks/README.md); a sim that wanders the same way, by a known amount, is what
    tests of `compare`'s between-run noise run against. t is seconds since the server
    started; the phase is drawn from --seed, so two sims with the same seed started together
    wander together (a host's drift), and different seeds wander apart."""

    amplitude: float  # a fraction, < 1
    period: float  # seconds
    phase: float = 0.0  # radians

    def factor(self, t: float) -> float:
        """The speed multiplier t seconds after the server started."""
        return 1.0 + self.amplitude * math.sin(2 * math.pi * t / self.period + self.phase)


def parse_drift(spec: str, seed: int = 0) -> Drift:
    """Parse `PCT:PERIOD`, e.g. `5:30`: ±5% over a 30 s cycle."""
    pct, sep, period = spec.strip().partition(":")
    try:
        a, p = float(pct), float(period)
    except ValueError:
        a = p = math.nan
    if not sep or not (0 <= a < 100 and p > 0 and math.isfinite(p)):
        raise UsageError(
            f"--drift {spec!r}: expected PCT:PERIOD, 0 <= PCT < 100 and PERIOD > 0 seconds, "
            "e.g. 5:30"
        )
    phase = random.Random(f"{seed}/drift").uniform(0.0, 2 * math.pi)
    return Drift(a / 100.0, p, phase)


@dataclass(slots=True)
class SimConfig:
    """Flags of `genbench sim`; see docs/sim.md for the timing model they drive."""

    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "genbench-sim"
    tps: float = 50.0
    per_seq_ms: float = 0.5
    ttft_ms: float = 100.0
    prefill_tps: float | None = None
    max_batch: int = 256
    max_model_len: int = 32768
    thinking_tokens: int = 0
    reasoning_dialect: str = "auto"  # reasoning_content, reasoning, or the dialect's (auto)
    spec_k: int = 1
    spec_accept: float = 1.0
    # TEXT:P rules: a request whose messages hold TEXT accepts each draft with P (sim/spec.py)
    spec_accept_match: list[str] = field(default_factory=list)
    # vLLM's --per-request-spec-decode-metrics: none, summary or detailed (sim/spec.py)
    spec_metrics: str = "none"
    output_len: str = "fixed:256"
    seed: int = 0
    api_key_env: str | None = None
    faults: list[Fault] = field(default_factory=list)
    drift: str | None = None  # PCT:PERIOD, see Drift
    dialect: str = "sim"  # one of SERVER_DIALECTS
    metrics: bool = True  # False: no /metrics (SGLang started without --enable-metrics)
    tool_calls: str | None = None  # N or LO:HI calls per conversation (sim/tools.py)
    token_ids: str = "auto"  # one of TOKEN_ID_DIALECTS, or the dialect's (auto)
    kv_tokens: int = 0  # the KV cache's capacity in tokens; 0: none (sim/kv.py)

    @property
    def step_b(self) -> float:
        """Seconds each decoding sequence adds to a decode step."""
        return self.per_seq_ms / 1000.0

    @property
    def step_a(self) -> float:
        """Fixed seconds of a decode step, chosen so one stream decodes at exactly `tps`."""
        return 1.0 / self.tps - self.step_b

    def step_seconds(self, n: int) -> float:
        """Duration of a decode step with `n` sequences decoding."""
        return self.step_a + self.step_b * n

    def aggregate_chunk_rate(self, n: int) -> float:
        """Chunks/s over all `n` decoding streams (tokens/s when spec_k is 1)."""
        return n / self.step_seconds(n)

    def prefill_seconds(self, prompt_tokens: int) -> float:
        extra = prompt_tokens / self.prefill_tps if self.prefill_tps else 0.0
        return self.ttft_ms / 1000.0 + extra

    def output_len_dist(self) -> OutputLen:
        return parse_output_len(self.output_len)

    def drift_model(self) -> Drift | None:
        return parse_drift(self.drift, self.seed) if self.drift else None

    def fault(self, kind: str) -> list[Fault]:
        return [f for f in self.faults if f.kind == kind]

    def validate(self) -> SimConfig:
        """Raise UsageError naming the first bad value; return self when all are good."""

        def need(ok: bool, flag: str, value: object, what: str) -> None:
            if not ok:
                raise UsageError(f"{flag} {value}: expected {what}")

        def number(flag: str, value: float, above_zero: bool) -> None:
            ok = (value > 0 if above_zero else value >= 0) and math.isfinite(value)
            need(ok, flag, value, "a number > 0" if above_zero else "a number >= 0")

        def one_of(flag: str, value: str, names: tuple[str, ...]) -> None:
            need(value in names, flag, repr(value), " or ".join(names))

        need(bool(self.host), "--host", repr(self.host), "a host name or address")
        need(0 <= self.port <= 65535, "--port", self.port, "0..65535 (0 picks a free port)")
        need(bool(self.model.strip()), "--model", repr(self.model), "a non-empty name")
        number("--tps", self.tps, above_zero=True)
        number("--per-seq-ms", self.per_seq_ms, above_zero=False)
        number("--ttft-ms", self.ttft_ms, above_zero=False)
        if self.prefill_tps is not None:
            number("--prefill-tps", self.prefill_tps, above_zero=True)
        need(self.max_batch >= 1, "--max-batch", self.max_batch, "an integer >= 1")
        need(self.max_model_len >= 1, "--max-model-len", self.max_model_len, "an integer >= 1")
        need(
            self.thinking_tokens >= 0, "--thinking-tokens", self.thinking_tokens, "an integer >= 0"
        )
        one_of("--dialect", self.dialect, SERVER_DIALECTS)
        if self.reasoning_dialect == "auto":
            self.reasoning_dialect = AUTO_REASONING[self.dialect]
        one_of("--reasoning-dialect", self.reasoning_dialect, REASONING_DIALECTS)
        if self.dialect == "sglang":
            need(
                self.reasoning_dialect == "reasoning_content",
                "--reasoning-dialect",
                repr(self.reasoning_dialect),
                "reasoning_content with --dialect sglang (the field SGLang sends)",
            )
        if self.token_ids == "auto":
            self.token_ids = AUTO_IDS[self.dialect]
        one_of("--token-ids", self.token_ids, TOKEN_ID_DIALECTS)
        need(
            self.kv_tokens >= 0 and self.kv_tokens % 16 == 0,
            "--kv-tokens",
            self.kv_tokens,
            "0 (no KV cache) or a multiple of 16 tokens (vLLM's block size)",
        )
        need(
            self.token_ids != "sglang" or self.dialect == "sglang",
            "--token-ids",
            repr(self.token_ids),
            "sglang ids with --dialect sglang (clients ask a server by its kind)",
        )
        need(
            self.token_ids != "vllm" or self.dialect != "sglang",
            "--token-ids",
            repr(self.token_ids),
            "sglang (or auto) with --dialect sglang: a client asks SGLang for its own ids, "
            "never vLLM's, so its rows would not be token-exact",
        )
        need(1 <= self.spec_k <= 64, "--spec-k", self.spec_k, "an integer in 1..64")
        need(
            0 <= self.spec_accept <= 1, "--spec-accept", self.spec_accept, "a probability in [0, 1]"
        )
        from genbench.sim.spec import SPEC_METRICS, parse_accept_match

        for rule in self.spec_accept_match:
            parse_accept_match(rule)
        one_of("--per-request-spec-decode-metrics", self.spec_metrics, SPEC_METRICS)
        self.drift_model()
        from genbench.sim.tools import parse_tool_calls  # it reads the sim's text

        parse_tool_calls(self.tool_calls)
        if self.step_a <= 0:
            raise UsageError(
                f"--per-seq-ms {self.per_seq_ms}: expected less than 1000/tps = "
                f"{1000.0 / self.tps:g} ms, so a decode step has a positive fixed part"
            )
        return self

    def notes(self) -> list[str]:
        """What the flags do that a person may not expect (one line each, said at start):
        a share of replies that are thinking only, or every one (a model that thinks past
        its length: allowed, since tests play one, and said)."""
        dist, n = self.output_len_dist(), self.thinking_tokens
        if not n:
            return []
        longest = {"fixed": dist.a, "uniform": dist.b}.get(dist.kind, math.inf)
        if longest <= n:
            return [f"--thinking-tokens {n} with --output-len {self.output_len}: every reply "
                    f"is thinking only, never an answer (its first {n} output tokens are "
                    f"thinking): give a longer --output-len (e.g. fixed:{n + 256}) or fewer "
                    "thinking tokens for answers"]  # fmt: skip
        if dist.kind == "uniform":
            share = max(0.0, min(1.0, (n - dist.a + 1) / (dist.b - dist.a + 1)))
        elif dist.kind == "lognormal":
            z = (math.log(n + 0.5) - math.log(dist.a)) / dist.b if dist.b else (
                -math.inf if n + 0.5 < dist.a else math.inf)  # fmt: skip
            share = 0.5 * (1 + math.erf(z / math.sqrt(2)))
        else:
            share = 0.0
        if share <= SOME_THINKING_ONLY:
            return []
        return [f"--thinking-tokens {n} with --output-len {self.output_len}: about "
                f"{share:.0%} of replies are thinking only, with no answer"]  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["faults"] = [f.to_dict() for f in self.faults]
        d["step_a_s"] = self.step_a
        d["step_b_s"] = self.step_b
        drift = self.drift_model()
        d["drift_phase_rad"] = drift.phase if drift else None
        return d


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def startup_line(cfg: SimConfig, port: int, auth: bool = False) -> str:
    faults = ", ".join(f.kind for f in cfg.faults) or "none"
    return (
        f"genbench sim listening on http://{_url_host(cfg.host)}:{port}/v1 "
        f"(model {cfg.model}, dialect {cfg.dialect}, tps {cfg.tps}, per-seq-ms "
        f"{cfg.per_seq_ms}, ttft-ms {cfg.ttft_ms}, prefill-tps {cfg.prefill_tps or 'none'}, "
        f"max-batch {cfg.max_batch}, "
        + (f"kv-tokens {cfg.kv_tokens}, " if cfg.kv_tokens else "")
        + f"max-model-len {cfg.max_model_len}, output-len "
        f"{cfg.output_len}, thinking-tokens {cfg.thinking_tokens} in "
        f"{cfg.reasoning_dialect}, token-ids {cfg.token_ids}, spec-k {cfg.spec_k}"
        + (f" accept {cfg.spec_accept:g}" if cfg.spec_k > 1 else "")
        + f", drift {cfg.drift or 'none'}, seed {cfg.seed}, tool-calls "
        f"{cfg.tool_calls or 'none'}, api key {'required' if auth else 'not required'}, "
        f"faults: {faults})"
    )
