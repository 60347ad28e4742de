"""The closed sets of a generate job's settings, one enum each: a flag's values, what
job.json keeps and what the code compares. A StrEnum is its text, so flags, files and
earlier jobs read as before. (`--token-ids`'s modes: transport/token_ids.IdsMode.)"""

from enum import StrEnum


class DataFormat(StrEnum):
    """--format; BATCH: the data files hold OpenAI Batch output lines (--answers batch)."""

    JSONL = "jsonl"
    PARQUET = "parquet"
    BATCH = "batch"


class Answers(StrEnum):
    CONVERSATIONS = "conversations"
    BATCH = "batch"  # the data files in Batch output shape
    BOTH = "both"  # conversations, and batch_output.jsonl beside them


class Turns(StrEnum):
    ALL = "all"  # every user turn's answer regenerated
    LAST = "last"  # the final one


class ToolPolicy(StrEnum):
    REPLAY = "replay"  # an agentic row's calls made again, the original results fed back
    KEEP = "keep"  # its calls and results kept, plain answers regenerated


class OnTruncated(StrEnum):
    KEEP = "keep"  # a row cut by max_tokens is kept, marked
    ERROR = "error"  # it goes to the errors file
