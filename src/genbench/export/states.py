"""`genbench export --format speculators-states | specforge-states`: a generated set with
its hidden states (`generate --hidden-states`) as the directory a trainer reads offline.

* `speculators-states`: vllm-project/speculators' offline layout: a `datasets` dataset
  (`load_from_disk`) of `input_ids`, `loss_mask` and `seq_len`, one row per sample `i`,
  and `hidden_states/hs_{i}.safetensors` (`hidden_states` [tokens, layers, hidden],
  `token_ids`): what its `ArrowDataset` reads through `hs_connectors.FileTransfer` and
  holds to the row with `check_hidden_states`. It takes `hidden_states[:, :-1]` as the
  auxiliary layers and `[:, -1]` as the verifier's last state: capture with the model's
  last layer last (`--for eagle3` does). The files are the captured ones, linked (copied
  where a link cannot be made), never rewritten.
* `specforge-states`: SpecForge's offline EAGLE-3 files, one `torch.save` file per sample
  (`data_{i:07d}.ckpt`, in sample order: `input_ids`, `loss_mask`, `aux_hidden_state`
  [1, tokens, (k-1)·H], `hidden_state` [1, tokens, H]), written without torch
  (`export/torchsave.py`).

A sample is a generated turn (the rules of `export/samples.py` leave cut and short ones
out); its ids are the captured file's: the prompt and the completion but its last id (that
one was sampled and never fed back, so it has no state), the loss over the completion's.
Each directory says which layers it holds, in whose numbering, and of which model
(`genbench_states.json`): the same physical layers are `i` in vLLM's and speculators'
numbering and `i - 1` in SpecForge's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from genbench import tensors
from genbench.atomic import fsync_path, publish_dir, temp_path, write_atomic
from genbench.errors import GenbenchError, UsageError
from genbench.export.formats import Format, register
from genbench.export.samples import Rules, samples
from genbench.export.torchsave import torch_save
from genbench.generate.store.layout import Layout
from genbench.inspect.reader import FileStats, data_files, kind_of, read_rows
from genbench.rows import turn_ids

SPECULATORS_STATES, SPECFORGE_STATES = "speculators-states", "specforge-states"
STATE_FORMATS = (SPECULATORS_STATES, SPECFORGE_STATES)
MANIFEST = "genbench_states.json"
WRITE_FAILED_EXIT = 12


def export_states(source: Path, fmt: str, out: Path, rules: Rules) -> dict[str, Any]:
    """Write `source` (a generate directory with hidden states) as `fmt` into the new
    directory `out` (made whole beside it, then renamed into place); the summary."""
    if fmt not in STATE_FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(STATE_FORMATS)}")
    layers = _layers(source)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists; give a new directory for the states")
    work = temp_path(out)
    shutil.rmtree(work, ignore_errors=True)
    try:
        (work / "hidden_states").mkdir(parents=True)
        n, left = _write(source, fmt, work, rules, layers)
        doc = _manifest(source, fmt, layers, n, left)
        write_atomic(work / MANIFEST, json.dumps(doc, indent=1).encode() + b"\n")
        with contextlib.suppress(FileNotFoundError):
            out.rmdir()  # an empty directory given: replaced by the whole one
        publish_dir(work, out)
    except OSError as e:
        shutil.rmtree(work, ignore_errors=True)
        raise GenbenchError(f"--out {out}: cannot write it ({e.strerror or e})",
                            WRITE_FAILED_EXIT) from None  # fmt: skip
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return {**doc, "out": str(out)}


def _layers(source: Path) -> dict[str, Any]:
    lay = Layout(source)
    try:
        doc = json.loads(lay.layers_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UsageError(f"{source}: no hidden states ({lay.layers_file} missing): generate "
                         "it with --hidden-states") from None  # fmt: skip
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        raise UsageError(f"{lay.layers_file}: no `layers` list in it")
    return doc


def _write(
    source: Path, fmt: str, work: Path, rules: Rules, layers: dict[str, Any]
) -> tuple[int, dict[str, int]]:
    lay, n = Layout(source), 0
    ids: list[list[int]] = []
    masks: list[list[int]] = []
    left: dict[str, int] = {}
    for path in data_files(source):
        fs = FileStats(path, kind_of(path))
        for _, _row, obj in read_rows(path, fs):
            for s, states in _kept(obj, rules, left, lay):
                assert s.prompt is not None and s.generated is not None
                seq = (s.prompt + s.generated)[:-1]
                mask = [0] * len(s.prompt) + [1] * (len(s.generated) - 1)
                src = lay.states_file(states)
                if fmt == SPECULATORS_STATES:
                    _link(src, work / "hidden_states" / f"hs_{n}.safetensors")
                    ids.append(seq)
                    masks.append(mask)
                else:
                    _specforge_file(src, seq, mask, work / f"data_{n:07d}.ckpt")
                n += 1
    if n == 0:
        raise UsageError(f"{source}: no generated turn with hidden states to export "
                         f"(left out: {left or 'none'})")  # fmt: skip
    if fmt == SPECULATORS_STATES:
        _dataset(work, ids, masks)
    else:
        (work / "hidden_states").rmdir()
    fsync_path(work)
    return n, left


def _kept(
    obj: Mapping[str, Any], rules: Rules, left: dict[str, int], lay: Layout
) -> list[tuple[Any, str]]:
    """The row's samples kept by the rules, each with its states' file: the one its turn
    names, else the layout's name for it where `genbench hidden-states` captured it."""
    named = {t.turn: t.states for t in turn_ids(obj)}
    out = []
    for s in samples(obj):
        why = s.left_out(rules, need_ids=True)
        states = named.get(s.turn)
        if states is None and (lay.out / lay.states_name(s.row_id, s.turn)).exists():
            states = lay.states_name(s.row_id, s.turn)
        why = why or (None if states else "no_states")
        if why is None and len(s.generated or ()) < 2:
            why = "short"  # one generated id: nothing supervised once its last is dropped
        if why is not None:
            left[why] = left.get(why, 0) + 1
        else:
            out.append((s, states))
    return out


def _link(src: Path, dst: Path) -> None:
    """The captured file, linked (a second name, no second copy), else copied."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _dataset(work: Path, ids: list[list[int]], masks: list[list[int]]) -> None:
    """A `datasets` dataset as `save_to_disk` leaves it (one Arrow stream file, its state
    and info), in torch format as speculators' own prepare-data saves it."""
    try:
        import pyarrow as pa
    except ImportError:
        raise UsageError("--format speculators-states writes an Arrow dataset: pip install "
                         "'genbench[parquet]'") from None  # fmt: skip
    table = pa.table({
        "input_ids": pa.array(ids, pa.list_(pa.int64())),
        "loss_mask": pa.array(masks, pa.list_(pa.int64())),
        "seq_len": pa.array([len(x) for x in ids], pa.int64()),
    })  # fmt: skip
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(work / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    state = {"_data_files": [{"filename": name}], "_fingerprint": os.urandom(8).hex(),
             "_format_columns": None, "_format_kwargs": {}, "_format_type": "torch",
             "_output_all_columns": False, "_split": None}  # fmt: skip
    (work / "state.json").write_text(json.dumps(state, indent=2))
    (work / "dataset_info.json").write_text(json.dumps({"description": "genbench export"}))


def _specforge_file(src: Path, seq: list[int], mask: list[int], dst: Path) -> None:
    """One SpecForge offline EAGLE-3 sample: the auxiliary layers side by side, the last
    layer as the target's state, in the file's own dtype (FP8 files: dequantized to bf16,
    as speculators' `FP8Transfer` gives them: SpecForge reads no scales)."""
    got = tensors.read(src, ("hidden_states", "hidden_states_scales"))
    t = got["hidden_states"]
    if t.dtype == "F8_E4M3":
        t = tensors.Tensor("BF16", t.shape, _bf16(t.scaled(got["hidden_states_scales"].floats())))
    n, k, h = t.shape
    aux = np.ascontiguousarray(t.array[:, :-1, :]).reshape(1, n, (k - 1) * h)
    last = np.ascontiguousarray(t.array[:, -1, :]).reshape(1, n, h)
    sample = {
        "input_ids": tensors.Tensor("I64", (n,), np.asarray(seq, dtype=np.int64)),
        "loss_mask": tensors.Tensor("I64", (n,), np.asarray(mask, dtype=np.int64)),
        "aux_hidden_state": tensors.Tensor(t.dtype, aux.shape, aux),
        "hidden_state": tensors.Tensor(t.dtype, last.shape, last),
    }
    write_atomic(dst, torch_save(sample))


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 to bfloat16's bits, rounded to nearest even (the values are finite)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _manifest(
    source: Path, fmt: str, layers: dict[str, Any], n: int, left: dict[str, int]
) -> dict[str, Any]:
    ids = list(layers["layers"])
    doc = {
        "format": fmt,
        "source": str(source),
        "model": layers.get("model"),
        "samples": n,
        "left_out": left,
        "layers": ids,
        "numbering": layers.get("numbering"),
        "hidden_size": layers.get("hidden_size"),
        "dtype": layers.get("dtype"),
        "tokens": "each sample's prompt and completion ids but the last (it has no state); "
        "the loss over the completion's",
        "aux_layers": ids[:-1],
        "last_layer": ids[-1],
    }
    if layers.get("dtype") == "F8_E4M3":
        doc["fp8"] = ("hs-connectors' FP8: hidden_states float8_e4m3fn times hidden_states_scales "
                      "[tokens, 1, 1]; speculators reads them through FP8Transfer"
                      if fmt != SPECFORGE_STATES else "dequantized to bf16")  # fmt: skip
    if fmt == SPECFORGE_STATES:
        doc["specforge_aux_layer_ids"] = [i - 1 for i in ids[:-1]]  # SpecForge's numbering
    return doc


register(Format(
    SPECULATORS_STATES, "a directory: speculators' dataset and hs_{i}.safetensors",
    "speculators: train on {out} (its ArrowDataset, hs_connectors.FileTransfer)",
    directory=lambda src, out, rules: export_states(src, SPECULATORS_STATES, out, rules),
))  # fmt: skip
register(Format(
    SPECFORGE_STATES, "a directory: SpecForge's offline EAGLE-3 files",
    "SpecForge: its offline EAGLE-3 training on {out}",
    directory=lambda src, out, rules: export_states(src, SPECFORGE_STATES, out, rules),
))  # fmt: skip
