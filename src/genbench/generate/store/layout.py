"""Every path of a generate output directory, named in one place.

    DIR/data-NNNNN.jsonl             finished rows, one JSON object per line, `id` first
    DIR/data-NNNNN.parquet           the same part once converted (--format parquet)
    DIR/errors.jsonl                 rows that failed, with the error kind
    DIR/quarantine.jsonl             unreadable lines found inside a data file
    DIR/replaced.jsonl               old answers taken out (--input-changed regenerate)
    DIR/stale.jsonl                  done rows kept although their request changed
    DIR/batch_output.jsonl           --answers both: every finished row in Batch shape
    DIR/batch_errors.jsonl           --answers batch: the failed rows in Batch shape
    DIR/.genbench/job.json           the job's settings, compared on resume
    DIR/.genbench/requests.jsonl     every request sent (the request log)
    DIR/.genbench/runs.jsonl         one line when a run starts, one when it ends
    DIR/.genbench/data-NNNNN.idx     which ids a part holds, up to which byte, their
                                     request hashes, content checks (advisory)
    DIR/.genbench/data-NNNNN.jsonl.sum  a sealed part's size and CRC-32 (seal.py)
    DIR/.genbench/damaged/           parts set aside by a resume: their bytes changed
    DIR/.genbench/lock               the one writer's lock
    DIR/.genbench/engines.jsonl      --serve: every engine start, stop and death, its cause
    DIR/.genbench/engines{-iofN}/    --serve: each engine's own output (bounded logs)
    DIR/.genbench/shards.json        the directory's shard scheme: none, or N (scheme.py)
    DIR/.genbench/shards.lock        held while the first run records the scheme
    DIR/hidden_states/layers.json    --hidden-states: the layer ids, their numbering, the model
    DIR/hidden_states/XX/KEY-T.safetensors
                                     --hidden-states: a generated turn's states (T: its
                                     index in the row's conversations; KEY: the row's id
                                     hashed), named in the turn's `hidden_states` field
    DIR/.genbench/hs-incoming{-iofN}/
                                     --hidden-states --serve: where the engines write them
    DIR/.genbench/vllm-path/         --hidden-states --serve: vLLM's way to genbench's
                                     connector (a link to the package)

Under `--shard i/N` each file of the shard's own carries its tag (`errors-1of4.jsonl`,
`job-1of4.json`, `lock-1of4`). The store writes these files; the report, inspect, export,
run and the command line read them through this module, so a name changes here alone
(tests/core/test_layers.py fails on a file name of the directory spelled elsewhere).
Nothing heavy is imported: readers that only look pay nothing.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

STATE_DIR = ".genbench"
PART_DIGITS = 5
SHARD_TAG_RE = re.compile(r"\d+of\d+")
# a data file of any job or shard (a tag is letters and digits)
DATA_FILE_RE = re.compile(rf"^data(?:-[A-Za-z0-9]+)*-(\d{{{PART_DIGITS}}})\.(jsonl|parquet)$")
JOB_FILE = "job.json"
LOCK = "lock"
LOCK_GLOB = LOCK + "*"  # the job's lock and each --shard's
BATCH_OUTPUT = "batch_output.jsonl"  # --answers both: every finished row, in Batch shape
BATCH_ERRORS = "batch_errors.jsonl"  # --answers batch: the failed rows, in Batch shape
ERRORS_GLOB = "errors*.jsonl"
JOB_GLOB = "job*.json"  # the job's settings and each --shard's
# The shard scheme every run of the directory must share (scheme.py), and the lock under
# which the first run records it.
SCHEME_FILE = "shards.json"
SCHEME_LOCK = "shards.lock"
HIDDEN_STATES = "hidden_states"  # the states' directory, and a turn's field naming its file
STATES_EXT = ".safetensors"


@dataclass(frozen=True)
class Layout:
    """The paths of one job's (or one --shard's) files in its output directory."""

    out: Path
    shard_tag: str | None = None

    @property
    def tag(self) -> str:
        return f"-{self.shard_tag}" if self.shard_tag else ""

    def _side(self, name: str) -> Path:
        return self.out / f"{name}{self.tag}.jsonl"

    @property
    def prefix(self) -> str:
        """Every data file's name starts with it: data, or data-<i>of<N>."""
        return "data" + self.tag

    @property
    def state(self) -> Path:
        return self.out / STATE_DIR

    @property
    def errors(self) -> Path:
        return self._side("errors")

    @property
    def quarantine(self) -> Path:
        return self._side("quarantine")

    @property
    def replaced(self) -> Path:
        return self._side("replaced")

    @property
    def stale(self) -> Path:
        return self._side("stale")

    @property
    def batch_output(self) -> Path:
        return self._side(BATCH_OUTPUT.removesuffix(".jsonl"))

    @property
    def batch_errors(self) -> Path:
        return self._side(BATCH_ERRORS.removesuffix(".jsonl"))

    @property
    def job(self) -> Path:
        return self.state / f"job{self.tag}.json"

    def sibling_jobs(self) -> list[Path]:
        """The job files of the directory's other shards (an array's tasks share DIR)."""
        return sorted(p for p in self.state.glob("job*.json") if p != self.job)

    @property
    def requests(self) -> Path:
        return self.state / f"requests{self.tag}.jsonl"

    @property
    def runs(self) -> Path:
        return self.state / f"runs{self.tag}.jsonl"

    @property
    def engine_events(self) -> Path:
        """Every start, stop and death of a --serve engine, with its cause."""
        return self.state / f"engines{self.tag}.jsonl"

    @property
    def engine_logs(self) -> Path:
        """The --serve engines' own output, one bounded log each."""
        return self.state / f"engines{self.tag}"  # the shards of an array share DIR

    @property
    def lock_name(self) -> str:
        return LOCK + self.tag

    def part(self, number: int, ext: str = "jsonl") -> Path:
        return self.out / f"{self.prefix}-{number:0{PART_DIGITS}d}.{ext}"

    def part_re(self) -> re.Pattern[str]:
        """This job's data files: (number, extension)."""
        return re.compile(rf"^{re.escape(self.prefix)}-(\d{{{PART_DIGITS}}})\.(jsonl|parquet)$")

    def data_files(self) -> list[Path]:
        """This job's data files, in the order they were written."""
        pattern = self.part_re()
        return sorted(p for p in self.out.iterdir() if pattern.match(p.name))

    def index(self, part: Path) -> Path:
        return self.state / (part.stem + INDEX_SUFFIX)

    @property
    def hidden_states(self) -> Path:
        """Every generated turn's hidden states (the shards of an array share it)."""
        return self.out / HIDDEN_STATES

    @property
    def layers_file(self) -> Path:
        return self.hidden_states / "layers.json"

    def states_name(self, row_id: str | int, turn: int) -> str:
        """A turn's states file, relative to the output directory (the turn names it): one
        name per row and turn, so a row generated again replaces its files, never adds."""
        key = hashlib.sha256(str(row_id).encode()).hexdigest()[:20]
        return f"{HIDDEN_STATES}/{key[:2]}/{key}-{turn}{STATES_EXT}"

    def states_file(self, name: str) -> Path:
        """A turn's `hidden_states` field as a path (refused when it leaves the directory)."""
        path = (self.out / name).resolve()
        if self.hidden_states.resolve() not in path.parents:
            raise ValueError(f"{name!r} is not under {HIDDEN_STATES}/")
        return path

    @property
    def hs_incoming(self) -> Path:
        """Where the engines a job starts (--serve) write each request's states."""
        return self.state / f"hs-incoming{self.tag}"

    @property
    def vllm_path(self) -> Path:
        return self.state / "vllm-path"

    def retried_errors(self, stamp: str) -> Path:
        """Where --retry-errors sets the errors file aside."""
        return self.state / f"{self.errors.stem}-retried-{stamp}.jsonl"


SEAL_SUFFIX = ".sum"
INDEX_SUFFIX = ".idx"
DAMAGED_DIR = "damaged"


def seal_of(part: Path) -> Path:
    """Where a data part's seal is kept: its size and checksum once it was sealed."""
    return part.parent / STATE_DIR / (part.name + SEAL_SUFFIX)


def index_of(part: Path) -> Path:
    """A data part's index, found from the part alone (any job or shard of its directory)."""
    return part.parent / STATE_DIR / (part.stem + INDEX_SUFFIX)


def damaged_place(part: Path) -> Path:
    """Where a resume sets a part aside whose bytes changed since it was sealed."""
    return part.parent / STATE_DIR / DAMAGED_DIR / part.name


def is_generate_dir(path: Path) -> bool:
    """A generate output: its state directory is there (written before any row)."""
    return (path / STATE_DIR).is_dir()


def job_file(path: Path) -> Path:
    """The job's own settings file (not a --shard's)."""
    return path / STATE_DIR / JOB_FILE


def error_files(path: Path) -> list[Path]:
    """The errors files of the job and of each --shard."""
    return sorted(path.glob(ERRORS_GLOB))


def shard_tags(path: Path) -> list[str | None]:
    """The request logs of a generate output: None for the job's own, a tag ('1of4') for
    each --shard's, the job's own first."""
    state = path / STATE_DIR
    if not path.is_dir() or not state.is_dir():
        return []
    tags: list[str | None] = []
    for p in sorted(state.glob("requests*.jsonl")):
        rest = p.name.removeprefix("requests").removesuffix(".jsonl")
        if rest == "":
            tags.insert(0, None)
        elif rest.startswith("-") and SHARD_TAG_RE.fullmatch(rest[1:]):
            tags.append(rest[1:])
    return tags


def engine_tags(path: Path) -> list[str | None]:
    """The --serve engine event files of a generate output, as `shard_tags` names them: a
    job whose first start failed left these and no request log."""
    state = path / STATE_DIR
    if not path.is_dir() or not state.is_dir():
        return []
    tags: list[str | None] = []
    for p in sorted(state.glob("engines*.jsonl")):
        rest = p.name.removeprefix("engines").removesuffix(".jsonl")
        if rest == "":
            tags.insert(0, None)
        elif rest.startswith("-") and SHARD_TAG_RE.fullmatch(rest[1:]):
            tags.append(rest[1:])
    return tags


def has_request_log(path: Path) -> bool:
    return any((path / STATE_DIR).glob("requests*.jsonl"))


def has_data(path: Path) -> bool:
    """Data files are there (a copy by merge --out or inspect --drop has them, and no
    request log: it keeps the rows, not the requests sent)."""
    return path.is_dir() and any(DATA_FILE_RE.match(p.name) for p in path.iterdir())


def data_tag(part: Path) -> str:
    """A data file's tag as its side files carry it: '' or '-1of4'."""
    return part.name[len("data") : part.name.rindex("-")]
