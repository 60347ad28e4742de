"""`genbench generate`: regenerate a prompt file with the target model, exactly once.

The job is split so each part can be reasoned about (and tested) alone:

* `input`    reads JSONL or Parquet rows, validates them and gives each a stable id;
* `params`   merges sampling parameters: defaults < config file < flags < per-row;
* `store`    owns the output directory: sharded append-only files, the done index,
             the errors file, crash repair and resume (the durability guarantee lives here);
* `servers`  keeps the pool of servers: which are up, which are being polled back;
* `progress` counts durable rows and turns recent windows into an ETA with an error bar;
* `engine`   the scheduler that moves rows from the input to servers to the store.

docs/generate.md describes the formats and guarantees for users.
"""
