"""scripts/vllm-test-server.sh refuses a port another server listens on: its health check
would otherwise pass on that server's /health while vLLM failed to bind (or died), and every
measurement after would be of the other server (seen: a run "on vLLM" that measured a sim)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "vllm-test-server.sh"


def test_start_refuses_a_port_in_use(sim_factory, tmp_path):
    sim = sim_factory()
    port = sim.url.rsplit(":", 1)[1].split("/")[0]
    venv, model = tmp_path / "venv", tmp_path / "model"
    venv.mkdir()
    model.mkdir()
    (venv / ".genbench-vllm-installed").write_text("stamp\n")
    (model / "config.json").write_text("{}\n")
    env = {**os.environ, "GENBENCH_VLLM_VENV": str(venv), "GENBENCH_VLLM_MODEL": str(model),
           "GENBENCH_VLLM_RUN_DIR": str(tmp_path / "run")}  # fmt: skip
    res = subprocess.run([str(SCRIPT), "start", "taken", port], env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert f"port {port} is already in use" in res.stderr
    assert res.stdout == ""  # no URL printed for a caller to use
    assert not (tmp_path / "run" / "vllm-taken.pid").exists()
