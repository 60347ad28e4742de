"""The drafter trainers' own offline loaders reading `genbench export`'s hidden-states
directories, run by the trainers' venv python (scripts/trainers.sh). Prints one JSON line:
per sample, what the loader gave (ids, shapes) and the largest difference between the
states it holds and the captured file's.

    python hs_trainer_consumer.py speculators DIR  # ArrowDataset, FileTransfer, its check
    python hs_trainer_consumer.py specforge DIR     # build_offline_eagle3_dataset
"""

import json
import sys
from pathlib import Path

import torch

mode, where = sys.argv[1], Path(sys.argv[2])
out = []
if mode == "speculators":
    from hs_connectors import FileTransfer
    from safetensors.torch import load_file
    from speculators.data_generation.offline import check_hidden_states
    from speculators.train.data import ArrowDataset

    transfer = FileTransfer(where / "hidden_states")
    ds = ArrowDataset(
        1 << 20, str(where), transfer, on_missing="raise", hidden_states_dtype=torch.float32
    )
    for i in range(len(ds)):
        ids = ds.data[i]["input_ids"].tolist()
        check_hidden_states(load_file(where / "hidden_states" / f"hs_{i}.safetensors"), ids)
        item = ds[i]
        out.append(
            {
                "input_ids": item["input_ids"].tolist(),
                "loss_mask": item["loss_mask"].tolist(),
                "aux": list(item["hidden_states"].shape),
                "last": list(item["verifier_last_hidden_states"].shape),
            }
        )
else:
    from specforge.data.preprocessing import build_offline_eagle3_dataset

    ds = build_offline_eagle3_dataset(str(where), max_len=1 << 20)
    for i in range(len(ds)):
        item = ds[i]
        out.append(
            {
                "input_ids": item["input_ids"][0].tolist(),
                "loss_mask": item["loss_mask"][0].tolist(),
                "aux": list(item["hidden_state"].shape),
                "last": list(item["target"].shape),
                "dtype": str(item["hidden_state"].dtype),
            }
        )
print(json.dumps(out))
