"""The drafter trainers' own offline loaders reading `genbench export`'s hidden-states
directories, run by the trainers' venv python (scripts/trainers.sh). Prints one JSON line:
for each trainer, per sample, what its loader gave (ids, loss mask, the states' shapes).

    python hs_trainer_consumer.py speculators=DIR specforge=DIR speculators_fp8=DIR
      speculators: ArrowDataset, hs_connectors.FileTransfer, check_hidden_states
      specforge: build_offline_eagle3_dataset
      speculators_fp8 (specforge_fp8): the same through hs_connectors.FP8Transfer (FP8), each
        dequantized sample through check_hidden_states; `sum`: its states' sum (float64)
"""

import json
import sys
from pathlib import Path

import torch


def speculators(where: Path) -> list[dict]:
    from hs_connectors import FileTransfer
    from safetensors.torch import load_file
    from speculators.data_generation.offline import check_hidden_states
    from speculators.train.data import ArrowDataset

    transfer = FileTransfer(where / "hidden_states")
    ds = ArrowDataset(1 << 20, str(where), transfer, on_missing="raise",
                      hidden_states_dtype=torch.float32)  # fmt: skip
    out = []
    for i in range(len(ds)):
        ids = ds.data[i]["input_ids"].tolist()
        check_hidden_states(load_file(where / "hidden_states" / f"hs_{i}.safetensors"), ids)
        item = ds[i]
        out.append({
            "input_ids": item["input_ids"].tolist(),
            "loss_mask": item["loss_mask"].tolist(),
            "aux": list(item["hidden_states"].shape),
            "last": list(item["verifier_last_hidden_states"].shape),
        })  # fmt: skip
    return out


def speculators_fp8(where: Path) -> list[dict]:
    from hs_connectors import FP8Transfer
    from speculators.data_generation.offline import check_hidden_states
    from speculators.train.data import ArrowDataset

    transfer = FP8Transfer(where / "hidden_states", dequantize_dtype=torch.float32)
    ds = ArrowDataset(1 << 20, str(where), transfer, on_missing="raise",
                      hidden_states_dtype=torch.float32)  # fmt: skip
    out = []
    for i in range(len(ds)):
        ids = ds.data[i]["input_ids"].tolist()
        sample = transfer.get_cached(i)
        check_hidden_states(sample, ids)
        item = ds[i]
        out.append({
            "input_ids": item["input_ids"].tolist(),
            "aux": list(item["hidden_states"].shape),
            "last": list(item["verifier_last_hidden_states"].shape),
            "sum": float(sample["hidden_states"].double().sum()),
        })  # fmt: skip
    return out


def specforge(where: Path) -> list[dict]:
    from specforge.data.preprocessing import build_offline_eagle3_dataset

    ds = build_offline_eagle3_dataset(str(where), max_len=1 << 20)
    out = []
    for i in range(len(ds)):
        item = ds[i]
        out.append({
            "input_ids": item["input_ids"][0].tolist(),
            "loss_mask": item["loss_mask"][0].tolist(),
            "aux": list(item["hidden_state"].shape),
            "last": list(item["target"].shape),
            "dtype": str(item["hidden_state"].dtype),
        })  # fmt: skip
    return out


READERS = {"speculators": speculators, "specforge": specforge, "speculators_fp8": speculators_fp8,
           "specforge_fp8": specforge}  # fmt: skip
got = {}
for arg in sys.argv[1:]:
    name, _, where = arg.partition("=")
    got[name] = READERS[name](Path(where))
print(json.dumps(got))
