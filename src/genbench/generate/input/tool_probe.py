"""Before a job with agentic rows: does the server take a request with tools at all?

A server that cannot call tools refuses every such request the same way (vLLM started
without `--enable-auto-tool-choice --tool-call-parser`: HTTP 400, '"auto" tool choice
requires ...'). Without this check each row would fail after its retries and the job
end with nothing done; with it, the job stops before it starts, in one line with the
server's own words. One small request, with the first agentic row's tools and
tool_choice, to one server that answered the preflight.
"""

from __future__ import annotations

from typing import Any

from genbench.errors import RETRYABLE_4XX, ExitCode, GenbenchError
from genbench.transport.client import ChatRequest, Client, Timeouts
from genbench.transport.endpoint import Endpoint

PROMPT = "Say just 'OK'."


async def probe_tools(
    ep: Endpoint, model: str, tools: list[dict[str, Any]], choice: Any, timeout: float
) -> None:
    """Raises (exit 9) when the server refuses the row's tools with a 4xx; any other
    failure is left to the job, whose retries and down-server handling deal with it."""
    params: dict[str, Any] = {"temperature": 0, "tools": tools}
    if choice is not None:
        params["tool_choice"] = choice
    req = ChatRequest("tool-check", [{"role": "user", "content": PROMPT}], 16, params)
    async with Client(ep, model, timeouts=Timeouts(3.0, timeout, timeout)) as client:
        rec = await client.chat(req, phase="check")
    status = rec.http_status
    if rec.ok or status is None or status not in range(400, 500) or status in RETRYABLE_4XX:
        return
    raise GenbenchError(
        f"{ep.base_url}: the server refuses a request with the input's tools (HTTP {status}: "
        f"{rec.error_message or 'no message'}); the input has agentic rows: serve the model "
        "with tool calling on (vLLM: --enable-auto-tool-choice --tool-call-parser NAME; "
        "SGLang: --tool-call-parser NAME)",
        ExitCode.SERVER_ERROR,
    )
