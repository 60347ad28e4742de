"""The job's input: JSONL, Parquet or Batch rows read, checked (every bad line named in one
pass) and given stable ids; their messages, tools and sampling params; the shard a run takes."""
