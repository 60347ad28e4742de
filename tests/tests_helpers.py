"""Small helpers importable from test modules (conftest fixtures are not importable)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"
