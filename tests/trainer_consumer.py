"""A drafter trainer's own data entry point reading a `genbench export` file, run by the
python of the trainers' venv (scripts/trainers.sh), never by genbench's: it imports only the
trainer and what it imports. It prints one JSON object on its last line: what the loader
returned, for the test to compare with what vLLM generated.

    python trainer_consumer.py tokens FILE            # SpecForge's data.prompts_path
    python trainer_consumer.py text FILE MODEL_DIR TEMPLATE   # SpecForge's data.train_data_path
    python trainer_consumer.py speculators FILE MODEL_DIR     # speculators prepare-data --data
    python trainer_consumer.py roundtrip IDS_JSON MODEL_DIR   # the tokenizer's own drift

`tokens` runs SpecForge's prompt preparation the way its trainer does for DFlash (at least 2
supervised ids, two of them in a row: its own filter) and for EAGLE-3 (at least 1);
`text` builds the dataset from the conversations file with the target's tokenizer and the
named SpecForge chat template, and decodes each sample too. `speculators` runs what
`speculators prepare-data --data FILE` runs (its dataset loading and preprocessing, pre-tokenized
rows passed through; it shuffles them). `roundtrip` decodes each list
of ids with the target's tokenizer and encodes the text again: which lists come back
different (the drift a trainer that re-tokenizes text suffers).
"""

from __future__ import annotations

import json
import sys

from specforge.data.loss_mask import has_consecutive_supervised_tokens
from specforge.data.prompt_builder import prepare_prompt_tasks


def prepare(path: str, tokenizer, template: str | None, **kw) -> list[dict]:
    tasks = prepare_prompt_tasks(
        path,
        tokenizer,
        chat_template=template,
        max_length=1 << 20,
        is_preformatted=False,
        train_only_last_turn=False,
        cache_dir=None,
        cache_key=None,
        num_proc=1,
        **kw,
    )
    return [dict(t["payload"]) for t in tasks]


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    out: dict = {}
    if mode == "tokens":
        out["dflash"] = prepare(
            path, None, None, min_loss_tokens=2, loss_mask_filter=has_consecutive_supervised_tokens
        )
        out["eagle3"] = prepare(path, None, None, min_loss_tokens=1)
    elif mode == "speculators":
        from speculators.data_generation.preprocessing import load_and_preprocess_dataset

        ds, _ = load_and_preprocess_dataset(
            sys.argv[3], [path], seq_length=1 << 20, build_dataset_num_proc=1,
            token_freq_path=sys.argv[4],
        )  # fmt: skip
        out["samples"] = [
            {"input_ids": r["input_ids"].tolist(), "loss_mask": r["loss_mask"].tolist()} for r in ds
        ]
    elif mode == "roundtrip":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(sys.argv[3])
        with open(path) as f:
            lists = json.load(f)
        out["drifted"] = {
            k: tok.encode(tok.decode(ids), add_special_tokens=False) != ids
            for k, ids in lists.items()
        }
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(sys.argv[3])
        samples = prepare(path, tok, sys.argv[4], min_loss_tokens=1)
        for s in samples:
            s["text"] = tok.decode(s["input_ids"])
        out["samples"] = samples
    print(json.dumps(out))


if __name__ == "__main__":
    main()
