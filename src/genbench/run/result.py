"""The result of a run: a versioned JSON document, rewritten atomically after every phase.

Readers (plan, compare, report) call `load_result`, which refuses files that
are not genbench results or are of a newer schema, with a one-line error.
The schema is documented in docs/results.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from genbench import __version__
from genbench.atomic import write_atomic
from genbench.errors import UsageError
from genbench.generate.store.layout import has_request_log, job_file

SCHEMA = "genbench.result"
SCHEMA_VERSION = 1
RESULT_FILE = "result.json"
REQUESTS_FILE = "requests.jsonl"


def document_head(schema: str, version: int, created_first: bool = False) -> dict[str, Any]:
    """The fields every schema'd document opens with (what `read_document` checks), the
    genbench that wrote it and when; exports and inspections have always said when first."""
    created = datetime.now(UTC).isoformat(timespec="seconds")
    head = {"schema": schema, "schema_version": version}
    if created_first:
        return head | {"created": created, "genbench_version": __version__}
    return head | {"genbench_version": __version__, "created": created}


def write_json_atomic(path: Path, obj: Any) -> None:
    """The document as indented JSON, written atomically (`genbench.atomic`)."""
    write_atomic(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def result_path(path: str | Path) -> Path:
    """Accept a run directory or its result.json."""
    p = Path(path)
    return p / RESULT_FILE if p.is_dir() else p


def repeat_dirs(path: str | Path) -> list[Path]:
    """The repeats `run --repeat` wrote under `path` (repeat-1, repeat-2, ... in order), or []."""
    p = Path(path)
    if not p.is_dir() or (p / RESULT_FILE).exists():
        return []
    found = []
    for d in p.glob("repeat-*"):
        index = d.name.removeprefix("repeat-")
        if index.isdigit() and (d / RESULT_FILE).exists():
            found.append((int(index), d))
    return [d for _, d in sorted(found)]


def configuration_dirs(path: str | Path) -> list[Path]:
    """The runs `run --serve A --serve B` or `run --url A --versus B` wrote under `path`
    (OUT/a, OUT/b, … in order): the subdirectories holding a result.json or repeats, where
    `path` holds neither itself; else [path]."""
    p = Path(path)
    if not p.is_dir() or (p / RESULT_FILE).exists() or repeat_dirs(p):
        return [p]
    found = sorted(d for d in p.iterdir() if d.is_dir() and ((d / RESULT_FILE).exists()
                                                               or repeat_dirs(d)))  # fmt: skip
    return found or [p]


def load_result(path: str | Path) -> dict[str, Any]:
    p = result_path(path)
    if not p.exists():
        reps = repeat_dirs(path)
        if len(reps) == 1:  # `run --versus` once: the side's one run
            p = result_path(reps[0])
        elif reps:
            raise UsageError(
                f"{path}: holds {len(reps)} repeats ({reps[0].name} … {reps[-1].name}), not one "
                "run: give one of them (compare and report take the whole directory)"
            )
        else:
            raise UsageError(f"{path}: {not_a_run(Path(path))}")
    return read_document(p, SCHEMA, SCHEMA_VERSION, "result")


def not_a_run(p: Path) -> str:
    """Why `p` holds no run, as a person would say it: what the directory is (a generate
    output, a plan, a plain folder) and what to give instead, not "no such file" for a
    directory that is there."""
    if not p.exists():
        return "no such file or run directory"
    if not p.is_dir():
        return "not a run directory"
    want = "this command reads a run's result.json (genbench run --out DIR writes one)"
    if job_file(p).exists():
        if not has_request_log(p):
            return f"a generate output with no request log yet, not a run: {want}"
        return (
            f"a generate output, not a run: {want}; `genbench report {p}` draws the job, "
            f"`genbench inspect {p}` checks its data, and `genbench plan --prompts FILE "
            "--url URL` forecasts a job from a pilot"
        )
    if (p / "plan.json").exists():
        return f"holds a plan (plan.json), not a run: {want}; `genbench report {p}` shows the plan"
    if (p / "inspect.json").exists():
        return f"holds an inspection (inspect.json), not a run: {want}"
    runs = sorted(d for d in p.iterdir() if (d / "result.json").is_file())
    if runs:  # run --serve A --serve B, --repeat: one run in each subdirectory
        names = " ".join(str(d) for d in runs)
        return f"holds runs, not a run itself: give them ({names})"
    what = "an empty directory" if not any(p.iterdir()) else "a directory with no result.json"
    return f"{what}, not a run: {want}"


def read_document(
    p: Path, schema: str, version: int, what: str, flag: str | None = None
) -> dict[str, Any]:
    """A genbench JSON document (result, plan, inspection) with its path in `_path`; one
    line naming the file (after the flag that named it, if any) when it is unreadable, not
    ours, or of a newer schema version. The one reader of every schema'd document."""
    where = f"{flag} {p}" if flag else f"{p}"
    try:
        obj = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file") from None
    except orjson.JSONDecodeError as e:
        raise UsageError(f"{where}: not a genbench {what} (not JSON: {e})") from None
    except OSError as e:
        raise UsageError(f"{where}: cannot read it ({e.strerror or e})") from None
    if not isinstance(obj, dict) or obj.get("schema") != schema:
        got = obj.get("schema") if isinstance(obj, dict) else type(obj).__name__
        raise UsageError(
            f"{where}: not a genbench {what} (field 'schema' is {got!r}, not {schema!r})"
        )
    got = obj.get("schema_version")
    if not isinstance(got, int):
        raise UsageError(f"{where}: field 'schema_version' is missing or not an integer")
    if got > version:
        raise UsageError(
            f"{where}: {what} schema version {got} is newer than this genbench reads "
            f"(field 'schema_version' is {got}, up to {version}): upgrade genbench"
        )
    obj["_path"] = str(p)
    return obj


def has_schema(path: str | Path, file_name: str, schema: str) -> bool:
    """Is this a document of `schema` (or a directory holding one as `file_name`, and no
    run result)? Reads the file's first 200 bytes only."""
    p = Path(path)
    if p.is_dir():
        return (p / file_name).exists() and not (p / RESULT_FILE).exists()
    if not p.is_file():
        return False
    try:
        with open(p, "rb") as f:
            head = f.read(200)
    except OSError:
        return False
    return f'"schema": "{schema}"'.encode() in head or f'"schema":"{schema}"'.encode() in head


def prepare_out_dir(out: Path) -> None:
    """A fresh or empty directory; never overwrite another run."""
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"--out {out}: exists and is not a directory")
        if (out / RESULT_FILE).exists() or (out / REQUESTS_FILE).exists():
            raise UsageError(f"--out {out}: already holds a run (result.json); choose another")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create it ({e.strerror or e})") from None


def default_out_dir(model: str | None) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in (model or "run"))[-40:]
    return Path("genbench-runs") / f"{stamp}-{safe}"
