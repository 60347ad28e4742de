"""The vLLM (CPU) test server with hidden-states capture: one per session, shared by every
hidden-states test (docs/hidden-states.md).

It is started the way `generate --serve` starts an engine: genbench's own command parser,
capture flags (`engines.hs_flags.with_capture`: vLLM's `extract_hidden_states` method and
genbench's CPU connector, found through a PYTHONPATH link) and process keeper. Its files go
to a directory of this session's; `reference_states` holds them against a Hugging Face
forward pass of the same model, run in the vLLM venv.

* `GENBENCH_SKIP_VLLM=1`: skip. A failed start is a test error, never a skip.
* `GENBENCH_VLLM_HS_URL` and `GENBENCH_VLLM_HS_STORAGE`: use a running server with capture
  (layers 1,2,3,4, writing to that directory) instead of starting one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures_vllm import SERVED_MODEL_NAME, _setup_once, _skip_requested  # noqa: I001

from genbench.engines.command import parse_command
from genbench.engines.hs_flags import with_capture
from genbench.engines.start import start_engines, stop_all
from genbench.transport.eventloop import run_async

REPO = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("GENBENCH_VLLM_VENV", REPO / ".cache" / "vllm-venv"))
MODEL = Path(os.environ.get("GENBENCH_VLLM_MODEL", REPO / ".cache" / "vllm-model"))
RUN_DIR = Path(os.environ.get("GENBENCH_VLLM_RUN_DIR", REPO / ".cache"))
LAYERS = [1, 2, 3, 4]  # the test model has 4; 4 is the stream before the final norm
START_TIMEOUT_S = float(os.environ.get("GENBENCH_VLLM_START_TIMEOUT", "300"))
REFERENCE = Path(__file__).with_name("hs_reference.py")
CONSUMER = Path(__file__).with_name("hs_trainer_consumer.py")


@dataclass(frozen=True)
class HSServer:
    url: str  # ends in /v1
    root: str
    model: str
    storage: Path  # where the engine writes its files
    layers: list[int]
    model_dir: Path
    command: str  # the command line as `--serve` would take it (without the capture flags)


def serve_text(port: str = "{port}") -> str:
    """The test engine's command, as a user would give it to `--serve`."""
    env = "VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1"
    return (f"{env} TRANSFORMERS_OFFLINE=1 {VENV}/bin/python -m vllm.entrypoints.openai.api_server"
            f" --model {MODEL} --served-model-name {SERVED_MODEL_NAME} --host 127.0.0.1"
            f" --port {port} --dtype float32 --max-model-len 4096 --enforce-eager"
            " --disable-uvicorn-access-log --reasoning-parser qwen3")  # fmt: skip


def reference_states(files: list[Path], layers: list[int]) -> list[dict[str, object]]:
    """Each file held against Hugging Face's forward pass on its own token_ids (max abs
    difference per layer), computed in the vLLM venv (torch, transformers)."""
    out = subprocess.run(
        [str(VENV / "bin" / "python"), str(REFERENCE), str(MODEL), json.dumps(layers),
         *map(str, files)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def trainer_reads(wheres: dict[str, Path]) -> dict[str, list[dict[str, object]]]:
    """What each trainer's own offline loader gives for its exported directory
    (tests/hs_trainer_consumer.py, one run of the trainers' venv: scripts/trainers.sh)."""
    script = str(REPO / "scripts" / "trainers.sh")
    # idempotent: 0.03 s once done (scripts/test.sh runs it after the vLLM setup)
    setup = subprocess.run(["bash", script, "setup"], capture_output=True, text=True,
                           timeout=900, check=False)  # fmt: skip
    assert setup.returncode == 0, f"scripts/trainers.sh setup failed:\n{setup.stderr[-3000:]}"
    py = subprocess.run(["bash", script, "python"], capture_output=True, text=True,
                        check=True).stdout.strip()  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    args = [f"{k}={v}" for k, v in wheres.items()]
    out = subprocess.run(
        [py, str(CONSUMER), *args],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def vllm_hs_server() -> Iterator[HSServer]:
    if _skip_requested():
        pytest.skip("GENBENCH_SKIP_VLLM=1: vLLM test server disabled")
    url = os.environ.get("GENBENCH_VLLM_HS_URL", "").rstrip("/").removesuffix("/v1")
    if url:
        storage = Path(os.environ["GENBENCH_VLLM_HS_STORAGE"])
        yield HSServer(f"{url}/v1", url, SERVED_MODEL_NAME, storage, LAYERS, MODEL, serve_text())
        return
    _setup_once()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    where = Path(tempfile.mkdtemp(prefix="hs-server-", dir=RUN_DIR))
    text = serve_text()
    cmd = with_capture(parse_command(text), LAYERS, where / "incoming", "genbench")
    engines = []
    try:
        engines = run_async(start_engines([cmd], where / "logs", START_TIMEOUT_S))
        yield HSServer(cmd.url, cmd.root, SERVED_MODEL_NAME, where / "incoming", LAYERS,
                       MODEL, text)  # fmt: skip
    finally:
        stop_all(engines)
        if not os.environ.get("GENBENCH_VLLM_KEEP_LOGS"):
            shutil.rmtree(where, ignore_errors=True)
