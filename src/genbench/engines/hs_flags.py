"""What an engine needs to capture hidden states: vLLM's flags, the layers, and the path
by which vLLM's process finds genbench's own connector.

vLLM (from 0.32) captures them with its `extract_hidden_states` speculative method and a
KV connector that writes each finished request's states to `DIR/<request id>.safetensors`
(docs/hidden-states.md). genbench adds the two flags to an engine it starts (`--serve`),
with the layers the user asked for, or the trainer's default for the model's depth.

Layer ids are **vLLM's numbering**: id `i` is the residual stream after `i` decoder layers
(Hugging Face's `hidden_states[i]` for `i < L`), and id `L` is the stream before the final
norm (not Hugging Face's `hidden_states[L]`, which is after it). speculators uses the same
numbering; SpecForge's is one less (its `i` is vLLM's `i + 1`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from genbench.engines.command import EngineCommand
from genbench.errors import UsageError

# who reads the states, and the layers it defaults to for a model of `depth` layers
TRAINERS = ("eagle3", "dflash")
CONNECTORS = ("auto", "genbench", "vllm")
OURS = "GenbenchHiddenStatesConnector"  # engines/hs_connector.py, on CPU (and anywhere)
OURS_MODULE = "genbench.engines.hs_connector"
STOCK = "ExampleHiddenStatesConnector"  # vLLM's own: CUDA only as written
NUMBERING = (
    "vllm: id i is the residual stream after i decoder layers (Hugging Face "
    "hidden_states[i] for i < L); id L is the stream before the final norm"
)
DFLASH_DRAFT_LAYERS = 5  # the drafter depth SpecForge's spacing is computed for


def default_layers(trainer: str, depth: int) -> list[int]:
    """The trainer's default layers for a model of `depth` decoder layers, in vLLM's
    numbering, the verifier's last state included where the trainer reads it.

    eagle3: speculators' `[2, L//2, L-3]` and `L` (its `hidden_states[:, -1]`); dflash:
    SpecForge's `build_target_layer_ids(L, 5)` shifted into vLLM's numbering (no last).
    A default that is not a set of distinct layers of the model is refused: a small
    model needs `--layers`."""
    if trainer == "eagle3":
        layers = [2, depth // 2, depth - 3, depth]
    elif trainer == "dflash":
        span = depth - 3 - 1
        n = DFLASH_DRAFT_LAYERS
        layers = [int(round(1 + i * span / (n - 1))) + 1 for i in range(n)]
    else:
        raise UsageError(f"--for {trainer!r}: expected one of {', '.join(TRAINERS)}")
    try:
        return check_layers(layers, depth)
    except UsageError:
        raise UsageError(
            f"--for {trainer}: its default layers for a {depth}-layer model are {layers}, "
            "not distinct layers of the model: give --layers"
        ) from None


def check_layers(layers: Sequence[int], depth: int | None) -> list[int]:
    """Distinct ids in 1..depth (vLLM's numbering), in the order given."""
    out = list(layers)
    if not out:
        raise UsageError("--layers: give at least one layer id")
    if len(set(out)) != len(out):
        raise UsageError(f"--layers {out}: a layer is given twice")
    top = depth if depth is not None else max(out)
    bad = [x for x in out if not 1 <= x <= top]
    if bad:
        raise UsageError(f"--layers {out}: {bad} outside 1..{top} (the model's {top} layers)")
    return out


def parse_layers(text: str) -> list[int]:
    """`--layers 2,16,29,32` read; a one-line UsageError otherwise."""
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise UsageError(f"--layers {text!r}: expected comma-separated layer ids") from None


def model_depth(model_dir: str | Path) -> int | None:
    """`num_hidden_layers` of a Hugging Face model directory's config.json, or None."""
    path = Path(model_dir) / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else {}
    depth = cfg.get("num_hidden_layers") if isinstance(cfg, dict) else None
    return depth if isinstance(depth, int) and depth > 0 else None


def on_gpu(env: dict[str, str]) -> bool:
    """Whether an engine started with `env` would see a GPU: a device node is there and
    CUDA_VISIBLE_DEVICES does not hide them all."""
    visible = env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists()


def vllm_flags(layers: Sequence[int], storage: Path, connector: str = OURS) -> list[str]:
    """vLLM's two flags that make it write each request's states under `storage`."""
    spec = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(layers)}},
    }
    kv: dict[str, object] = {
        "kv_connector": connector,
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(storage)},
    }
    if connector == OURS:
        kv["kv_connector_module_path"] = OURS_MODULE
    return [
        "--speculative-config", json.dumps(spec, separators=(",", ":")),
        "--kv-transfer-config", json.dumps(kv, separators=(",", ":")),
    ]  # fmt: skip


def connector_path(where: Path) -> Path:
    """A directory holding only a link to genbench's package, for vLLM's PYTHONPATH: its
    process then imports engines/hs_connector.py (and two empty `__init__`s) and nothing
    else of genbench's environment (whose packages may differ from vLLM's)."""
    where.mkdir(parents=True, exist_ok=True)
    link = where / "genbench"
    target = Path(__file__).resolve().parents[1]
    if link.is_symlink() and link.resolve() != target:
        link.unlink()  # another genbench's: this one's connector is what the engine runs
    with contextlib.suppress(FileExistsError):  # another job made it at the same time
        link.symlink_to(target, target_is_directory=True)
    return where


def pythonpath(where: Path, env: dict[str, str]) -> str:
    """PYTHONPATH for the engine: the link's directory first, then what it had."""
    before = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    return os.pathsep.join(p for p in (str(connector_path(where)), before) if p)


def with_capture(
    cmd: EngineCommand, layers: Sequence[int], storage: Path, connector: str = "auto"
) -> EngineCommand:
    """`cmd` with vLLM's capture flags added and, for genbench's connector, the
    PYTHONPATH by which vLLM's process finds it (a link beside `storage`).
    `connector`: auto (genbench's where the engine sees no GPU, vLLM's stock one on a
    GPU), genbench or vllm."""
    if connector not in CONNECTORS:
        raise UsageError(f"connector {connector!r}: expected one of {', '.join(CONNECTORS)}")
    if connector == "auto":
        connector = "vllm" if on_gpu(cmd.env) else "genbench"
    name = OURS if connector == "genbench" else STOCK
    storage.mkdir(parents=True, exist_ok=True)
    env = dict(cmd.env)
    if name == OURS:
        env["PYTHONPATH"] = pythonpath(storage.parent / "vllm-path", cmd.env)
    argv = [*cmd.argv, *vllm_flags(layers, storage, name)]
    return replace(cmd, argv=argv, env=env)


def served_model(cmd: EngineCommand) -> str | None:
    """The model an engine's command loads: `--model M`, else the word after `serve`
    (`vllm serve M`)."""
    words = cmd.argv
    for i, w in enumerate(words):
        if w == "--model" and i + 1 < len(words):
            return words[i + 1]
        if w.startswith("--model="):
            return w.split("=", 1)[1]
    if "serve" in words:
        i = words.index("serve")
        if i + 1 < len(words) and not words[i + 1].startswith("-"):
            return words[i + 1]
    return None
