"""Is a server up? The one probe: /health, and where a server has none (or keeps it behind
auth) its model list. `check` says why in words; a job polling a server that went down
asks only yes or no; both read the answer the same way here.
"""

from __future__ import annotations

from genbench.transport.client import ConnectionPool
from genbench.transport.endpoint import Endpoint
from genbench.transport.failures import Failure

# /health answered so: the server has none, or keeps it behind auth; /v1/models tells
NO_HEALTH = frozenset({401, 403, 404, 405})


async def answers(pool: ConnectionPool, ep: Endpoint, timeout: float) -> bool:
    """/health answers 200, or, where there is no /health, /v1/models does."""
    try:
        status, _, _ = await pool.get(ep.root + "/health", timeout, ep.headers())
        if status == 200:
            return True
        if status not in NO_HEALTH:
            return False
        status, _, _ = await pool.get(ep.base_url + "/models", timeout, ep.headers())
        return status == 200
    except Failure:
        return False
