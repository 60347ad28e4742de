"""One number formatter for everything genbench prints: tokens, bytes, durations, rates.

Why one: a table that says "0.3B" in one row and "87.5M" or "1.062B" in the next makes
the reader do the arithmetic the tool should have done. Every command (run, plan,
generate, compare, report, inspect) formats through these functions, so the same
quantity looks the same everywhere:

* scaled quantities (tokens, bytes) keep three significant digits in the largest unit
  that leaves at least 1 ("300M", "87.5M", "1.06B"; "2.41 GB");
* durations pick s, min or h by size, one decimal ("45.2 s", "12.5 min", "142.5 h");
* rates one decimal under 1,000 and none above ("26.5 tok/s", "2,345 tok/s");
* a missing value is an em dash, never "None" or "nan".
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

MISSING = "—"
_TOKEN_UNITS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))
_BYTE_UNITS = ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"))


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def sig3(x: float) -> str:
    """Three significant digits without exponent: 1.06, 87.5, 300, 4,096."""
    a = abs(x)
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _scaled(x: float, units: tuple[tuple[float, str], ...], sep: str, base: str) -> str:
    for size, unit in units:
        if abs(x) >= size * 0.9995:  # 999.6K reads as 1.00M, not 1,000K
            return f"{sig3(x / size)}{sep}{unit}"
    return f"{x:,.0f}{sep}{base}".rstrip()


def tokens(x: float | None) -> str:
    """Token counts: 812, 4.10K, 87.5M, 1.06B."""
    return MISSING if _missing(x) else _scaled(float(x), _TOKEN_UNITS, "", "")  # type: ignore[arg-type]


def nbytes(x: float | None) -> str:
    """Sizes in decimal units: 512 B, 4.10 KB, 2.41 GB."""
    return MISSING if _missing(x) else _scaled(float(x), _BYTE_UNITS, " ", "B")  # type: ignore[arg-type]


def count(x: float | None) -> str:
    """Whole counts with thousands separators: 1,400."""
    return MISSING if _missing(x) else f"{x:,.0f}"


def duration(seconds: float | None) -> str:
    """45.2 s, 12.5 min, 142.5 h."""
    if _missing(seconds):
        return MISSING
    s = float(seconds)  # type: ignore[arg-type]
    if abs(s) < 120:
        return f"{s:.1f} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:,.1f} h"


def duration_range(lo: float, hi: float) -> str:
    """Both ends in the unit of the upper one: '61.9 – 74.7 min'; with a decimal more (up
    to 3) where two different ends would print alike ('2.40 – 2.43 min', not '2.4 – 2.4')."""
    text = duration(hi)
    value, unit = text.rsplit(" ", 1)
    div = {"s": 1.0, "min": 60.0, "h": 3600.0}[unit]
    for nd in (1, 2, 3):
        low, high = f"{lo / div:,.{nd}f}", f"{hi / div:,.{nd}f}"
        if low != high or lo == hi:
            break
    return f"{low} – {high} {unit}"


def days(seconds: float | None) -> str:
    return MISSING if _missing(seconds) else f"{seconds / 86400:,.2f}"  # type: ignore[operator]


def under_a_day(seconds: Any) -> bool:
    """A time said in s, min or h alone: no days figure beside it ('0.00' says nothing the
    time does not say better; None: no figure at all)."""
    return _missing(seconds) or seconds < 86400


def rate(x: float | None, unit: str = "tok/s") -> str:
    """26.5 tok/s, 2,345 tok/s; `unit` "" for a bare number."""
    if _missing(x):
        return MISSING
    text = f"{x:,.1f}" if abs(x) < 1000 else f"{x:,.0f}"  # type: ignore[arg-type]
    return f"{text} {unit}".rstrip()


def ms(seconds: float | None) -> str:
    """Milliseconds from seconds: 0.8 ms, 45 ms, 1,204 ms."""
    if _missing(seconds):
        return MISSING
    v = float(seconds) * 1000  # type: ignore[arg-type]
    return f"{v:.1f} ms" if abs(v) < 10 else f"{v:,.0f} ms"


def pct(x: float | None, signed: bool = False) -> str:
    """A fraction as a percentage: 0.123 -> 12.3%, signed: +12.3% (and +0.0% for what
    rounds to nothing, never -0.0%)."""
    if _missing(x):
        return MISSING
    if abs(x) < 0.0005:  # type: ignore[arg-type]
        x = 0.0
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def counted(n: int, noun: str) -> str:
    """`1 row`, `2 rows`: a count and its noun (the plural by an s)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def number(x: float | None, digits: int = 1) -> str:
    """A plain number with separators and fixed decimals."""
    return MISSING if _missing(x) else f"{x:,.{digits}f}"


def when(iso: Any) -> str:
    """'2026-01-31T09:15:02+00:00' as '2026-01-31 09:15 UTC'."""
    try:
        t = datetime.fromisoformat(str(iso)).astimezone(UTC)
    except ValueError:
        return str(iso or "")
    return t.strftime("%Y-%m-%d %H:%M UTC")


def program(
    argv0: str | None = None, path: str | None = None, executable: str | None = None
) -> str:
    """How a command said to a person names genbench: `genbench` where that name on PATH
    is this program, else the path it was run by as typed ('.venv/bin/genbench', which
    README's walk uses, where a bare `genbench` is not found). Under `python -m genbench`
    (argv0 is genbench/__main__.py): `python -m genbench` where PATH's `python` is this
    interpreter, else this interpreter's path ('/opt/venv/bin/python3 -m genbench').
    Anything else: `genbench`. `argv0`, `path` (PATH) and `executable` (the interpreter)
    default to this process's."""
    import os
    import shlex
    import shutil
    import sys

    argv0 = sys.argv[0] if argv0 is None and sys.argv else (argv0 or "")
    path = os.environ.get("PATH", "") if path is None else path
    if _module_main(argv0):
        python = sys.executable if executable is None else executable
        if not python:
            return "genbench"  # an embedded interpreter: no path to name it by
        found = shutil.which("python", path=path)
        name = "python" if found and _same_python(found, python) else shlex.quote(python)
        return f"{name} -m genbench"
    if os.path.basename(argv0) != "genbench" or os.sep not in argv0:
        return "genbench"
    found = shutil.which("genbench", path=path)
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return "genbench"
    return shlex.quote(argv0)


def _module_main(argv0: str) -> bool:
    """argv0 is genbench's __main__.py: `python -m genbench` ran it."""
    import os

    parent, name = os.path.split(argv0)
    return name == "__main__.py" and os.path.basename(parent) == "genbench"


def _same_python(found: str, python: str) -> bool:
    """PATH's `python` is this interpreter: the same file in the same directory. A venv's
    python is a link to the system's: the same file, but not the same environment (its
    packages are not the venv's), so the directory must be the same too."""
    import os

    here, there = os.path.abspath(found), os.path.abspath(python)
    return os.path.dirname(here) == os.path.dirname(there) and (
        os.path.realpath(here) == os.path.realpath(there)
    )
