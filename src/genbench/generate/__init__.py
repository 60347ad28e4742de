"""`genbench generate`: regenerate a prompt file with the target model, exactly once.

The job is split so each part can be reasoned about (and tested) alone:

* `input`    reads JSONL or Parquet rows, validates them and gives each a stable id;
* `params`   merges sampling parameters: defaults < config file < flags < per-row;
* `store`    owns the output directory: sharded data files, the done index, the errors
             file, the request log, crash repair and resume (the durability guarantee);
  `durable`  its append-only files; `rows` the output row format and Parquet;
* `conversation` a row on its way: its turns in order, as one unit of `genbench.load`;
* `pipeline` rows through load, and what a failed request means for its row;
* `servers`  the pool of servers (load slots): which are up, which are polled back;
* `progress` durable counts, and rates and the ETA from the request records (`stats`);
* `wander`   how the speed wandered: the ETA's range, and the plan's (`plan.bar`);
* `job`      one run: input, preflight, the load, the store;
* `batch`    OpenAI Batch API request files in, Batch output lines out;
* `exporter` the job's progress on /metrics for Prometheus (`--metrics-port`);
* `listeners` several listeners at once, and `runlog` the notes each run leaves.

docs/generate.md describes the formats and guarantees for users.
"""
