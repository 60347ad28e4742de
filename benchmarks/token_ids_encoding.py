"""How to store token ids in JSONL: bytes per token and the reader's cost per token.

Candidates for a turn's `token_ids` (and `prompt_token_ids`):

  json     a JSON array of ints: what every JSON reader (and a trainer's loader) reads
  b64      base64 of little-endian int32: 5.33 bytes a token whatever the vocabulary
  b64-u24  base64 of 3-byte ids (vocabularies up to 16.7M): 4 bytes a token

and the Parquet column generate writes (list<int32>, zstd) for comparison. The ids are
drawn the way a model's are: a Zipf-like mix over the vocabulary (most tokens common,
low ids in BPE vocabularies), for a ~152K (Qwen) and a ~32K (Llama-2) vocabulary. The
cost is CPU per token to turn a stored turn back into a list of ints, as the reader
(`genbench.rows.turn_ids`) must: orjson's parse of the array, or base64
decoding + `array.frombytes` + `tolist`.

    .venv/bin/python benchmarks/token_ids_encoding.py
"""

from __future__ import annotations

import base64
import io
import random
import time
from array import array

import orjson


def ids(vocab: int, n: int, seed: int) -> list[int]:
    rnd = random.Random(seed)
    # half the tokens from the first 5% of the vocabulary (common BPE merges), the rest
    # spread over all of it
    return [
        int(rnd.paretovariate(1.2) * vocab / 200) % vocab if rnd.random() < 0.5
        else rnd.randrange(vocab)
        for _ in range(n)
    ]  # fmt: skip


def enc_json(t: list[int]) -> bytes:
    return orjson.dumps({"token_ids": t})


def dec_json(b: bytes) -> list[int]:
    return orjson.loads(b)["token_ids"]


def enc_b64(t: list[int]) -> bytes:
    return orjson.dumps({"token_ids": base64.b64encode(array("i", t).tobytes()).decode()})


def dec_b64(b: bytes) -> list[int]:
    a = array("i")
    a.frombytes(base64.b64decode(orjson.loads(b)["token_ids"]))
    return a.tolist()


def enc_u24(t: list[int]) -> bytes:
    raw = b"".join(x.to_bytes(3, "little") for x in t)
    return orjson.dumps({"token_ids": base64.b64encode(raw).decode()})


def dec_u24(b: bytes) -> list[int]:
    raw = base64.b64decode(orjson.loads(b)["token_ids"])
    return [int.from_bytes(raw[i : i + 3], "little") for i in range(0, len(raw), 3)]


CODECS = {"json": (enc_json, dec_json), "b64": (enc_b64, dec_b64), "b64-u24": (enc_u24, dec_u24)}
OVERHEAD = len(orjson.dumps({"token_ids": []}))


def parquet_bytes(turns: list[list[int]]) -> float | None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    table = pa.table({"token_ids": pa.array(turns, type=pa.list_(pa.int32()))})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.tell()


def main() -> None:
    print("| vocabulary | encoding | bytes/token | decode ns/token | round trip |")
    print("|---|---|---:|---:|---|")
    for vocab in (151_936, 32_000):
        turns = [ids(vocab, 2000, seed) for seed in range(200)]
        tokens = sum(len(t) for t in turns)
        for name, (enc, dec) in CODECS.items():
            blobs = [enc(t) for t in turns]
            size = sum(len(b) - OVERHEAD for b in blobs) / tokens
            best = float("inf")
            for _ in range(5):
                t0 = time.process_time()
                back = [dec(b) for b in blobs]
                best = min(best, time.process_time() - t0)
            ok = back == turns
            print(f"| {vocab:,} | {name} | {size:.2f} | {1e9 * best / tokens:.1f} | {ok} |")
        pq = parquet_bytes(turns)
        if pq is not None:
            print(f"| {vocab:,} | Parquet list<int32> zstd | {pq / tokens:.2f} | | |")


if __name__ == "__main__":
    main()
