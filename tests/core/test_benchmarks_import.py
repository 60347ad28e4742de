"""Every benchmarks/ script still imports against today's genbench: a script calls
genbench's own functions (Store, RowMeta, the plan's models), and a rename in src/ that
leaves one behind is found here, not by the next person who runs the benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.core

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

# one process imports them all (as `python benchmarks/x.py` would: its folder on sys.path),
# so the suite's own modules are not disturbed; each failure is one line
IMPORT_ALL = """
import importlib.util, sys, traceback
sys.path.insert(0, sys.argv[1])
for path in sys.argv[2:]:
    spec = importlib.util.spec_from_file_location("bench_" + path.rsplit("/", 1)[-1][:-3], path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        print(f"{path}: {type(e).__name__}: {e}")
"""


def test_every_benchmark_imports() -> None:
    scripts = sorted(str(p) for p in BENCH.glob("*.py"))
    assert scripts
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, str(BENCH), *scripts],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", done.stdout
