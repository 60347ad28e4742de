"""What `genbench export` tells a user to give the trainer names commands and settings the
trainers have: `speculators prepare-data` and its flags (speculators 0.9.0's CLI, not a
script of its repository), SpecForge's `data.prompts_path` / `data.train_data_path` (fields
of its run config) and `specforge train`. Checked against the pinned trainers
(`scripts/trainers.sh`, on the vLLM test venv), without a server.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

from genbench.export.formats import FORMATS
from genbench.export.specforge import SPECFORGE, TOKENS
from genbench.export.speculators import SPECULATORS

pytestmark = [pytest.mark.vllm]


@pytest.fixture(scope="module")
def trainers_bin(tmp_path_factory) -> Path:
    """The trainers' venv's bin directory, set up (cached) by scripts/trainers.sh."""
    log = tmp_path_factory.mktemp("trainers") / "setup.log"
    with log.open("w") as f:
        rc = subprocess.run([str(REPO / "scripts" / "trainers.sh"), "setup"], stdout=f,
                            stderr=subprocess.STDOUT, timeout=900).returncode  # fmt: skip
    if rc != 0:
        pytest.fail(f"scripts/trainers.sh setup failed ({rc}):\n{log.read_text()[-3000:]}")
    py = subprocess.run([str(REPO / "scripts" / "trainers.sh"), "python"], capture_output=True,
                        text=True, check=True).stdout.strip()  # fmt: skip
    return Path(py).parent


def helps(exe: Path, *args: str) -> str:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    p = subprocess.run([str(exe), *args, "--help"], capture_output=True, text=True, timeout=300,
                       env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def test_the_speculators_hint_is_its_prepare_data_command(trainers_bin):
    hint = FORMATS[SPECULATORS].give.format(out="train.jsonl")
    m = re.fullmatch(r"speculators: speculators prepare-data (.*)", hint)
    assert m, hint
    text = helps(trainers_bin / "speculators", "prepare-data")
    for flag in re.findall(r"--[a-z][\w-]*", m.group(1)):
        assert flag in text, (flag, text)


def test_the_specforge_hints_name_fields_of_its_config(trainers_bin):
    assert "-c CONFIG" in helps(trainers_bin / "specforge", "train")
    code = "from specforge.config.schema import DataConfig; print(*DataConfig.model_fields)"
    fields = subprocess.run([str(trainers_bin / "python"), "-c", code], capture_output=True,
                            text=True, check=True, timeout=300).stdout.split()  # fmt: skip
    for fmt in (TOKENS, SPECFORGE):
        (key,) = re.findall(r"data\.(\w+)", FORMATS[fmt].give)
        assert key in fields, (fmt, key, fields)
