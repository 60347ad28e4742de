#!/usr/bin/env bash
# Mutation testing of the measurement core, on demand (CPU heavy: not part of CI).
#
#   bash scripts/mutation.sh                  # every function in scripts/mutation-scope.txt
#   bash scripts/mutation.sh stats store      # only those modules (stats records plan store
#                                             # compare selfcheck)
#   JOBS=1 bash scripts/mutation.sh           # one worker (default 2), niced
#
# mutmut (3.x) mutates the functions named in scripts/mutation-scope.txt and runs, for
# each mutant, the core tests that reach it (tests/core, marker `core`; see [tool.mutmut]
# in pyproject.toml). The report (scripts/mutation_report.py) counts killed, survived
# and the survivors listed as equivalent in benchmarks/mutation-equivalent.txt; the
# results stay in mutants/ (`mutmut show NAME` prints one mutant's diff).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
"$PY" -c 'import mutmut' 2>/dev/null || "$PY" -m pip install -q 'mutmut>=3.8,<4'
declare -A MODULE=(
  [stats]='genbench.stats.' [records]='genbench.records.' [plan]='genbench.plan'
  [store]='genbench.generate.store.writer.' [compare]='genbench.compare.rule.'
  [selfcheck]='genbench.run.selfcheck.'
)
patterns=()
while IFS= read -r p; do
  [ -z "$p" ] && continue
  if [ $# -eq 0 ]; then
    patterns+=("$p")
  else
    for m in "$@"; do
      [ -n "${MODULE[$m]:-}" ] || { echo "unknown module '$m' (${!MODULE[*]})" >&2; exit 2; }
      [[ "$p" == "${MODULE[$m]}"* ]] && patterns+=("$p")
    done
  fi
done < scripts/mutation-scope.txt
# the source directory must come from mutants/, not from an installed or PYTHONPATH copy
unset PYTHONPATH
nice -n 10 "$PY" -m mutmut run --max-children "${JOBS:-2}" "${patterns[@]}" >/dev/null || true
"$PY" scripts/mutation_report.py "${patterns[@]}"
