"""`genbench generate`: regenerate a prompt file with the target model, exactly once.

The job is split so each part can be reasoned about (and tested) alone:

* `input/`   the job's input: JSONL, Parquet or Batch rows read and checked (`reader`),
             their messages, tools and sampling params (defaults < config < flags < row),
             the shard a run takes;
* `store/`   the one owner of the output directory: `layout` names every path, `writer`
             the data files (parts), the done index, the errors file and the request log,
             `durable` its append-only files (the output row format is `genbench.rows`),
             `resume` what a rerun finds (repairs, settings compared, changed input),
             `batch` the answers in OpenAI Batch shape;
* `recipe`   what shapes a row's requests: the job's sampling, --turns and --tool-policy
             (`Recipe`, what the job's salt hashes), and each row's turns asked (`TurnPlan`);
* `conversation` a row on its way: its turns in order, as one unit of `genbench.load`;
  `agent` a conversation that replays or keeps an agentic row's tool calls;
* `pipeline` rows through load, and what a failed request means for its row;
* `servers`  the pool of servers (load slots): which are up, which are polled back;
* `progress` durable counts, and rates and the ETA from the request records (`stats`),
             shown each tick as one typed `Snapshot`;
* `wander`, `eta` how the speed wandered: the ETA's range, and the plan's (`plan.bar`);
* `job`      one run: input, preflight, the load, the store, and what it leaves (run
             notes, the Batch output of --answers);
* `metrics_server` the job's progress on /metrics for Prometheus (`--metrics-port`), a table;
* `listeners` several listeners at once, and the notes each run leaves.

docs/generate.md describes the formats and guarantees for users.
"""
