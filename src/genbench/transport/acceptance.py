"""A request's speculative acceptance, as the engine says it, in one shape.

Engines that speculate can say, per request, how many verify steps it took and how many of
the drafted tokens the target accepted. Two dialects, read here into one dict (the record's
`spec`, docs/acceptance.md):

* vLLM (`--per-request-spec-decode-metrics summary|detailed`): `metrics.speculative_decoding`
  on the last chunk (the one with `usage`; a whole body has it at its top level):
  `num_spec_steps`, `num_draft_tokens`, `num_accepted_draft_tokens`, `acceptance_histogram`
  (index j: steps that accepted j drafts), `mean_acceptance_length` (1 + accepted / steps).
* SGLang (`return_spec_tokens_details: true` in the request): `sglext.spec_tokens_details`,
  on a `choices: []` chunk before the usage chunk (a whole body: at its top level):
  `spec_verify_ct`, `spec_num_proposed_drafts`, `spec_num_correct_drafts`,
  `spec_correct_drafts_histogram`. Older SGLang: `meta_info.spec_verify_ct` alone; its
  accepted drafts are then the completion tokens less the first (from prefill) less one a step.

The one shape: `steps`, `drafted` (None where not given), `accepted`, `length` (tokens a verify
step: 1 + accepted / steps, the definition of vLLM's and SGLang's `/metrics` counters, so
per-request figures pool to the server's own), `hist` where given, and `src`. SGLang's own
`spec_accept_length` (completion tokens / verify steps) counts the prefill's token too; it is
not kept: one definition, across engines.
"""

from __future__ import annotations

from typing import Any

from genbench.transport.server_kind import traits

VLLM, SGLANG, SGLANG_META = "vllm", "sglang", "sglang-meta"

# what the request asks of each dialect (vLLM needs nothing: its flag is the server's)
REQUEST_FIELDS: dict[str, dict[str, Any]] = {SGLANG: {"return_spec_tokens_details": True}}
HOW = {VLLM: "vLLM's metrics.speculative_decoding", SGLANG: "SGLang's sglext.spec_tokens_details",
       SGLANG_META: "SGLang's meta_info.spec_verify_ct"}  # fmt: skip


def describe(dialect: str | None, note: str | None) -> str:
    """check's line: each request's acceptance said, or how to have it said."""
    if dialect is not None:
        return f"speculative acceptance per request: yes ({HOW[dialect]})"
    return f"speculative acceptance per request: none ({note})"


def ask_for(kind: str | None) -> str | None:
    """The dialect a request to a server of this kind asks acceptance in, or None."""
    return traits(kind).acceptance


def _int(v: Any) -> int | None:
    return v if type(v) is int and v >= 0 else None


def _hist(v: Any) -> list[int] | None:
    if isinstance(v, list) and v and all(type(x) is int and x >= 0 for x in v):
        return list(v)
    return None


def shape(src: str, steps: int, accepted: int | None, drafted: int | None,
          hist: list[int] | None) -> dict[str, Any] | None:  # fmt: skip
    """The one shape, or None when the figures say nothing (no step: no speculation)."""
    if not steps or accepted is None:
        return None
    out: dict[str, Any] = {"src": src, "steps": steps, "accepted": accepted,
                           "length": round(1.0 + accepted / steps, 6)}  # fmt: skip
    if drafted is not None:
        out["drafted"] = drafted
    if hist is not None:
        out["hist"] = hist
    return out


def from_vllm(m: Any) -> dict[str, Any] | None:
    """vLLM's `metrics.speculative_decoding` object."""
    if not isinstance(m, dict):
        return None
    steps = _int(m.get("num_spec_steps"))
    return shape(VLLM, steps or 0, _int(m.get("num_accepted_draft_tokens")),
                 _int(m.get("num_draft_tokens")), _hist(m.get("acceptance_histogram")))  # fmt: skip


def from_sglang(d: Any) -> dict[str, Any] | None:
    """SGLang's `sglext.spec_tokens_details` (one request: an object; n > 1: a list)."""
    if isinstance(d, list) and d:
        d = d[0]
    if not isinstance(d, dict):
        return None
    steps = _int(d.get("spec_verify_ct"))
    return shape(SGLANG, steps or 0, _int(d.get("spec_num_correct_drafts")),
                 _int(d.get("spec_num_proposed_drafts")),
                 _hist(d.get("spec_correct_drafts_histogram")))  # fmt: skip


def from_meta(meta: Any) -> int | None:
    """Older SGLang: `meta_info.spec_verify_ct`, the verify steps alone."""
    return _int(meta.get("spec_verify_ct")) if isinstance(meta, dict) else None


def read(obj: dict[str, Any], choice: Any) -> dict[str, Any] | int | None:
    """What a chunk or a whole body says of acceptance: the shape, a bare verify count
    (older SGLang, completed by `from_steps` once the completion tokens are known), or None."""
    m = obj.get("metrics")
    if m is not None and isinstance(m, dict):
        got = from_vllm(m.get("speculative_decoding"))
        if got is not None:
            return got
    ext = obj.get("sglext")
    if ext is not None and isinstance(ext, dict) and "spec_tokens_details" in ext:
        return from_sglang(ext["spec_tokens_details"])
    meta = obj.get("meta_info")
    if meta is None and isinstance(choice, dict):
        meta = choice.get("meta_info")
    if isinstance(meta, dict) and "spec_num_correct_drafts" in meta:
        return from_sglang(meta)
    return from_meta(meta) if meta is not None else None


def from_steps(steps: int, completion_tokens: int | None) -> dict[str, Any] | None:
    """Older SGLang's verify count with the completion tokens: the first token comes from
    prefill, each step gives its accepted drafts and one token of the target's own."""
    if completion_tokens is None or not steps:
        return None
    return shape(SGLANG_META, steps, max(0, completion_tokens - 1 - steps), None, None)



def _row(r: dict[str, Any], noun: str) -> str:
    n = r["requests"]
    spread = f"p10–p90 {r['p10']:.2f}–{r['p90']:.2f}"
    return f"{r['length']:.2f} ({n:,} {noun}{'s' if n != 1 else ''}, {spread})"


def _bin(r: dict[str, Any]) -> str:
    hi = r["hi"]
    return f"{r['lo']:,}–{hi:,} tokens" if hi is not None else f"over {r['lo'] - 1:,} tokens"


def lines(acc: dict[str, Any], what: str = "", noun: str = "request") -> list[str]:
    """What a summary of acceptance (genbench.stats.acceptance_of: per request, or per row
    of a data set) says, in plain lines: pooled and spread, the groups worst first, the
    output lengths."""
    n, of = acc["requests"], acc.get("of", acc["requests"])
    said = f"{n:,} of {of:,} {noun}s" if of != n else f"{n:,} {noun}{'s' if n != 1 else ''}"
    src = f"; {HOW.get(acc['src'], acc['src'])}" if acc.get("src") else ""
    head = (f"speculative acceptance{what}: length {acc['length']:.2f} pooled over {said} "
            f"(per {noun} p10 {acc['p10']:.2f} · p50 {acc['p50']:.2f} · p90 {acc['p90']:.2f}"
            f"{src})")  # fmt: skip
    out = [head]
    if acc.get("by_group"):
        out.append("  by group, worst first: " + " · ".join(
            f"{g['group']} {_row(g, noun)}" for g in acc["by_group"]))  # fmt: skip
    if len(acc.get("by_length") or ()) > 1:
        out.append("  by output length: " + " · ".join(
            f"{_bin(b)} {_row(b, noun)}" for b in acc["by_length"]))  # fmt: skip
    return out


__all__ = [
    "HOW", "REQUEST_FIELDS", "SGLANG", "SGLANG_META", "VLLM", "ask_for", "describe",
    "from_sglang", "from_steps", "from_vllm", "lines", "read", "shape",
]  # fmt: skip
