"""Engines genbench starts itself (`--serve CMD`): start one, wait until it answers, watch it,
name why it died (its exit status or signal, the kernel's OOM line, its own last error),
restart it, and leave nothing running when genbench ends (docs/engines.md).

Above `check` (an engine is healthy when check's preflight passes) and below `generate`,
`run` and the commands, which each start engines through `start.py`; `generate` keeps its
own alive through `supervisor.py`.
"""
