"""Summarize a mutmut run over the core: per module, mutants, killed, survived, and the
survivors explained as equivalent in benchmarks/mutation-equivalent.txt.

An equivalent entry is a tab-separated line: name, the mutated line (as printed below),
why. The line is checked against the mutant, so an entry left stale by a change to the
source is reported rather than silently counted. A timeout counts as killed (the mutant
made the tests hang, which fails them)."""

from __future__ import annotations

import fnmatch
import sys
from collections import Counter
from pathlib import Path

from mutmut.__main__ import SourceFileMutationData, get_diff_for_mutant, walk_mutatable_files
from mutmut.stats import status_by_exit_code

EQUIVALENT = Path("benchmarks/mutation-equivalent.txt")
KILLED = {"killed", "timeout"}


def module_of(name: str) -> str:
    return name.split(".x_")[0].split(".xǁ")[0]


def mutated_line(name: str, path: str) -> str:
    diff = get_diff_for_mutant(name, path=path)
    added = [
        ln[1:].strip()
        for ln in diff.splitlines()
        if ln.startswith("+") and not ln.startswith("+++")
    ]
    return " ".join(added)


def main(patterns: list[str]) -> int:
    equivalent: dict[str, tuple[str, str]] = {}
    if EQUIVALENT.exists():
        for ln in EQUIVALENT.read_text().splitlines():
            if ln.strip() and not ln.startswith("#"):
                name, line, why = (p.strip() for p in ln.split("\t", 2))
                equivalent[name] = (line, why)
    rows: dict[str, Counter] = {}
    survivors: list[tuple[str, str, str]] = []
    stale: list[str] = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in sorted(data.exit_code_by_key.items()):
            if not any(fnmatch.fnmatch(name, p) for p in patterns):
                continue
            status = status_by_exit_code[code]
            c = rows.setdefault(module_of(name), Counter())
            c["mutants"] += 1
            if status in KILLED:
                c["killed"] += 1
                continue
            line = mutated_line(name, str(path))
            if status == "survived" and name in equivalent:
                if equivalent[name][0] == line:
                    c["equivalent"] += 1
                    continue
                stale.append(name)
            c["survived" if status == "survived" else status.replace(" ", "_")] += 1
            survivors.append((name, status, line))
    total = Counter()
    print(f"{'module':<28}{'mutants':>8}{'killed':>8}{'equiv.':>8}{'left':>6}{'score':>8}")
    for module, c in sorted(rows.items()):
        total.update(c)
        left = c["mutants"] - c["killed"] - c["equivalent"]
        score = c["killed"] / (c["mutants"] - c["equivalent"])
        print(
            f"{module:<28}{c['mutants']:>8}{c['killed']:>8}{c['equivalent']:>8}{left:>6}{score:>8.1%}"
        )
    left = total["mutants"] - total["killed"] - total["equivalent"]
    score = total["killed"] / max(1, total["mutants"] - total["equivalent"])
    print(
        f"{'all':<28}{total['mutants']:>8}{total['killed']:>8}{total['equivalent']:>8}{left:>6}{score:>8.1%}"
    )
    print("\nnot killed and not listed as equivalent:")
    for name, status, line in survivors:
        print(f"  {status:<9} {name}: {line}")
    for name in stale:
        print(f"  stale equivalent entry (the mutant's line changed): {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["*"]))
