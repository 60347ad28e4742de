"""How to read a run's sweep, in words, where its numbers seem to disagree: why burst sits
below sustained, why single stream and the sweep's C=1 differ, and why a steady window
was unstable (on the local demo: a busy machine, said with its load).

The console (`run.render`) and the report's numbers (`report.html`) print these lines, so
the two explain the same numbers the same way. Each is said only when the run shows what
it explains.
"""

from __future__ import annotations

from typing import Any

from genbench import fmt

STABLE = 0.05  # a steady window's halves within 5% (stats.Window.stable)


def unstable_note(halves: tuple[float, float] | None) -> str:
    """A phase's note: its window's two halves, which disagree."""
    a, b = halves or (0.0, 0.0)
    return (
        f"steady window not stable: its first half ran at {fmt.rate(a)}, its second at "
        f"{fmt.rate(b)} (more than 5% apart)"
    )


def _sweep(doc: dict[str, Any], kind: str) -> dict[int, dict[str, Any]]:
    return {
        int(p["concurrency"]): p for p in doc.get("phases") or []
        if p.get("kind") == kind and p.get("concurrency")
    }  # fmt: skip


def _levels(cs: list[int]) -> str:
    return ", ".join(f"C={c}" for c in cs)


def sweep_readings(doc: dict[str, Any]) -> list[str]:
    """The lines that explain this run's sweep table (none when nothing needs saying)."""
    return [*_wave_lines(doc), *_burst_lines(doc), *_single_lines(doc), *_unstable_lines(doc)]


def _wave_lines(doc: dict[str, Any]) -> list[str]:
    """Sustained levels whose window held fewer than two waves of C requests: nothing (or
    little) was replaced, so what they measured is a burst, not a sustained rate."""
    short = {}
    for c, p in _sweep(doc, "sustained").items():
        n = (p.get("summary") or {}).get("requests")
        if isinstance(n, int) and n < 2 * c:
            short[c] = n
    if not short:
        return []
    said = ", ".join(f"C={c}: {n:,} requests, {n / c:.1f} waves" for c, n in sorted(short.items()))
    return [
        f"not sustained ({said}): fewer than two waves of C requests ran, so few or none "
        "was replaced and the window held no steady state: give each level longer "
        "(--duration longer than two requests take) or more requests (--requests-per-slot)"
    ]


def _burst_lines(doc: dict[str, Any]) -> list[str]:
    burst, sus = _sweep(doc, "burst"), _sweep(doc, "sustained")
    below, above, near = [], [], []
    for c in sorted(set(burst) & set(sus)):
        b = (burst[c].get("summary") or {}).get("output_tps")
        s = (sus[c].get("summary") or {}).get("steady_tps")
        if b and s:
            (near if abs(b - s) <= STABLE * s else below if b < s else above).append(c)
    lines = []
    within = f"; within 5%, read as one rate: {_levels(near)}" if near and (below or above) else ""
    if below:
        lines.append(
            f"burst more than 5% below sustained ({_levels(below)}{within}): a burst's rate "
            "is its output over its "
            "whole wall time, the start while its C requests begin and the end while the last "
            "ones finish alone included; sustained counts only the steady window, C requests "
            "in flight throughout, which is what a long job gets"
        )
    if above:
        lines.append(
            f"burst more than 5% above sustained ({_levels(above)}"
            + (within if not below else "")
            + "): the two phases ran one after the other, and the server's speed moved "
            "between them"
        )
    return lines


def _single_lines(doc: dict[str, Any]) -> list[str]:
    """Single stream against the sweep's C=1 per-request rate, when they differ."""
    singles = {
        int(p["max_tokens"]): (p.get("summary") or {}).get("decode_tps", {}).get("mean")
        for p in doc.get("phases") or []
        if p.get("kind") == "single" and p.get("max_tokens")
    }
    singles = {k: v for k, v in singles.items() if v}
    one = _sweep(doc, "sustained").get(1) or _sweep(doc, "burst").get(1)
    c1 = ((one or {}).get("summary") or {}).get("decode_tps", {}).get("p50")
    if not singles or not c1 or one is None:
        return []
    length = one.get("max_tokens")
    same = singles.get(int(length)) if length else None
    lo, hi = min(singles.values()), max(singles.values())
    if lo * (1 - STABLE) <= c1 <= hi * (1 + STABLE) and (
        same is None or abs(c1 - same) <= STABLE * same
    ):
        return []
    by_len = [singles[k] for k in sorted(singles)]
    # the general claim only where this run's rows show it (the shortest the fastest)
    slower = (" (a longer output decodes over a longer context, slower per token)"
              if len(by_len) > 1 and by_len[0] == max(by_len) and by_len[-1] == min(by_len)
              else "")  # fmt: skip
    line = (
        f"single stream ({_range(lo, hi)}) against C=1's {fmt.rate(c1)} per request: each "
        f"single-stream row is one output length's mean decode rate{slower}; C=1's is the "
        f"median of its requests at {length} tokens, measured later"
    )
    if same is not None and abs(c1 - same) > STABLE * same:
        line += (
            f"; at {length} tokens the two read {fmt.rate(same, '')} and {fmt.rate(c1, '')} "
            f"({fmt.pct(c1 / same - 1, signed=True)}): the server's speed moved between them"
        )
    return [line]


def _range(lo: float, hi: float) -> str:
    return fmt.rate(lo) if lo == hi else f"{fmt.rate(lo, '')}–{fmt.rate(hi)}"


def _unstable_lines(doc: dict[str, Any]) -> list[str]:
    shaky = {
        c: p for c, p in _sweep(doc, "sustained").items()
        if (p.get("summary") or {}).get("steady_stable") is False
    }  # fmt: skip
    if not shaky:
        return []
    c, worst = max(shaky.items(), key=lambda cp: _apart(cp[1]))
    a, b = worst["summary"].get("steady_halves_tps") or (0.0, 0.0)
    lines = [
        f"* unstable ({_levels(sorted(shaky))}): the steady window's first and second halves "
        f"ran more than 5% apart (C={c}: {fmt.rate(a, '')} and {fmt.rate(b)}), so no one rate "
        "describes it: the server's speed moved while it was measured"
    ]
    loads = [
        (cl.get("host_load"), cl.get("host_cpus"))
        for p in shaky.values()
        if (cl := p.get("client") or {}).get("host_load") is not None
    ]
    # busy: more runnable threads than the cores, genbench's own (about one) aside
    busy = max((lc for lc in loads if lc[1] and lc[0] > lc[1] + 1), default=None)
    local = bool((doc.get("target") or {}).get("local_demo"))
    if local and busy:
        lines.append(
            f"this machine was busy (load {busy[0]:.1f} on {fmt.counted(busy[1], 'core')}): "
            "other programs took CPU time from the demo server while it was measured. Run "
            "it again when the machine is quieter, or give each level longer: a longer "
            "window averages more of that (--duration 10)"
        )
    elif local:
        lines.append(
            "the demo server shares this machine's cores with genbench and anything else "
            "running: a longer window averages more of that (--duration 10)"
        )
    else:
        lines.append(
            "a longer window averages more (--duration S, or more --requests-per-slot); "
            "--repeat 3 shows how far the server's speed moves between runs"
        )
    return lines


def _apart(p: dict[str, Any]) -> float:
    a, b = (p.get("summary") or {}).get("steady_halves_tps") or (0.0, 0.0)
    return abs(a - b) / max(a, b) if max(a, b) > 0 else 0.0
