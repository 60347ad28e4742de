"""A secret stays secret: the one redaction every line and file genbench writes goes through.

What is a secret: the value of a `NAME=value` word whose name says key, token, secret or
password (`HF_TOKEN=hf_...`, `SIMKEY=sk-...`); the value of a flag so named (`--api-key
sk-...`, `--hf-token=...`; the name's last word says it: not `--api-key-env NAME` or
`--api-key-file PATH`, which name where a secret is, nor `--token-ids`, `--max-tokens` or
`--bytes-per-token`); and every value `register`ed: the job's API key,
and the secrets found in an engine's command line, wherever they appear later (an engine
printing its arguments at start-up, an error echoing a header). Each becomes `***`.

The real value still reaches whom it is for: redaction is applied where genbench writes
or prints (the console, `.genbench/engines.jsonl`, job.json, runs.jsonl, the engine's
captured log, `/metrics`, error lines), never to the command it runs or the headers it
sends.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "***"
MIN_LEN = 8  # shorter: a placeholder (vLLM's EMPTY, "none"), too common a string to replace
_WORDS = ("key", "token", "secret", "password", "passwd")
# a flag naming where a secret is, not the secret: its value is kept
_WHERE = ("env", "file", "path", "dir", "name", "var")
_VALUE = r"""[^\s"'\\]+"""  # stops at a quote: a value inside a JSON string stays inside it
_ASSIGN = re.compile(rf"(?<![\w.-])([A-Za-z_][A-Za-z0-9_]*)=({_VALUE})")
_FLAG = re.compile(rf"(?<![\w-])(--?[A-Za-z][A-Za-z0-9_-]*)(=|\s+)(?!-)({_VALUE})")
_known: set[str] = set()


def secret_name(name: str) -> bool:
    """Does `name` (an environment variable or a flag) say it holds a secret?"""
    parts = [p for p in re.split(r"[-_]+", name.lower()) if p]
    if not parts or parts[-1] in _WHERE or parts[-2:-1] == ["per"]:  # --bytes-per-token: a rate
        return False
    return parts[-1].endswith(_WORDS)  # the name's last word: not --token-ids, --max-tokens


def register(*values: str | None) -> None:
    """Values to redact wherever they appear from now on (the job's key, an engine's)."""
    for v in values:
        if v and len(v) >= MIN_LEN and v != MASK:
            _known.add(v)


def redact(text: str) -> str:
    """`text` with every secret replaced by `***`."""
    if not text:
        return text
    for v in sorted(_known, key=len, reverse=True):
        if v in text:
            text = text.replace(v, MASK)
    text = _ASSIGN.sub(_masked_assign, text)
    return _FLAG.sub(_masked_flag, text)


def _masked_assign(m: re.Match[str]) -> str:
    return f"{m[1]}={MASK}" if secret_name(m[1]) and not m[2].startswith(MASK) else m[0]


def _masked_flag(m: re.Match[str]) -> str:
    return f"{m[1]}{m[2]}{MASK}" if secret_name(m[1]) and not m[3].startswith(MASK) else m[0]


def redact_bytes(data: bytes) -> bytes:
    """A line of bytes (an engine's output) redacted; bytes that are not UTF-8 kept."""
    text = data.decode("utf-8", "surrogateescape")
    out = redact(text)
    return data if out == text else out.encode("utf-8", "surrogateescape")


def redact_doc(doc: Any) -> Any:
    """Every string of a JSON-like document (dicts, lists) redacted; keys too."""
    if isinstance(doc, str):
        return redact(doc)
    if isinstance(doc, dict):
        return {redact_doc(k): redact_doc(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [redact_doc(v) for v in doc]
    return doc


def secrets_in(words: Iterable[str], env: dict[str, str]) -> tuple[list[str], list[str]]:
    """The secret values of a command line (its `NAME=value` environment and its flags),
    and the settings that hold them as a person reads them (`--api-key`, `HF_TOKEN=`)."""
    values: list[str] = []
    names: list[str] = []
    for name, value in env.items():
        if secret_name(name):
            values.append(value)
            names.append(f"{name} (its environment)")
    ws = list(words)
    for i, w in enumerate(ws):
        flag, eq, val = w.partition("=")
        if not flag.startswith("-"):
            continue
        if "key" in flag.lower() and flag.lower().endswith(_WHERE):  # --api-key-env NAME
            names.append(f"{flag} {val or (ws[i + 1] if i + 1 < len(ws) else '')}".strip())
            continue
        if not secret_name(flag):
            continue
        names.append(flag)
        if eq:
            values.append(val)
        elif i + 1 < len(ws):
            values.append(ws[i + 1])
    return values, names
