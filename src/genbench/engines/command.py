"""An engine's command line, as `--serve CMD` gives it: its words, its environment, its port.

The command is split as a POSIX shell would split it (`shlex`), and run without a shell,
so what runs is what was written. Leading `NAME=value` words set the engine's environment
(`CUDA_VISIBLE_DEVICES=0 vllm serve ...`). Its port is `{port}` where the command says so
(genbench picks a free loopback port, and keeps it across restarts), else the command's
own `--port N`; a command with neither is refused, as genbench could not find it.
`local` is the local demo target (llama.cpp serving genbench's tiny model, src/genbench/
local/), as an engine like any other.
"""

from __future__ import annotations

import re
import shlex
import socket
import sys
from dataclasses import dataclass, field, replace

from genbench.errors import UsageError
from genbench.redact import register, secrets_in
from genbench.transport.endpoint import Endpoint

PORT = "{port}"
LOCAL = "local"
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1", "localhost": "127.0.0.1"}


@dataclass(frozen=True)
class EngineCommand:
    """One engine to start: argv with the port filled in, extra environment, where it
    listens (`url`, the OpenAI base URL), and the command as the user wrote it (`text`)."""

    argv: list[str]
    port: int
    host: str = "127.0.0.1"
    env: dict[str, str] = field(default_factory=dict)
    text: str = ""
    # the job's API key, sent on the start check, the health probe and every request (an
    # engine started with a key of its own asks for it), and where the job read it from
    api_key: str | None = field(default=None, repr=False)
    key_from: str = ""

    @property
    def root(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    @property
    def endpoint(self) -> Endpoint:
        """Where genbench asks it, with the job's key."""
        return Endpoint.parse(self.url, self.api_key)

    def keyed(self, api_key: str | None, key_from: str = "") -> EngineCommand:
        """The same command, asked with the job's key."""
        return replace(self, api_key=api_key or None, key_from=key_from)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's choice); the engine binds it next."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def parse_command(text: str, flag: str = "--serve") -> EngineCommand:
    """`--serve TEXT` read into the command to run; a one-line UsageError naming the flag
    when it cannot be (empty, unbalanced quotes, no port)."""
    if text.strip() == LOCAL:
        return _local()
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise UsageError(f"{flag} {text!r}: {e}") from None
    env: dict[str, str] = {}
    while words and _ENV.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    register(*secrets_in(words, env)[0])  # its keys reach it, and no line genbench writes
    if not words:
        raise UsageError(f"{flag} {text!r}: no command to run")
    host = _LOOPBACK.get(_option(words, "--host") or "", _option(words, "--host") or "127.0.0.1")
    if any(PORT in w for w in words):
        port = free_port(host)
        words = [w.replace(PORT, str(port)) for w in words]
        return EngineCommand(words, port, host, env, text)
    given = _option(words, "--port")
    if given is None:
        raise UsageError(
            f"{flag} {text!r}: genbench cannot tell which port it listens on: put {PORT} "
            "where the port goes (e.g. --port {port}) or give --port N"
        )
    if not given.isdigit() or not 0 < int(given) < 65536:
        raise UsageError(f"{flag} {text!r}: --port {given!r} is not a port number")
    return EngineCommand(words, int(given), host, env, text)


def _option(words: list[str], name: str) -> str | None:
    """The value of `name V` or `name=V` in `words` (the last one given), else None."""
    found = None
    for i, w in enumerate(words):
        if w == name and i + 1 < len(words):
            found = words[i + 1]
        elif w.startswith(name + "="):
            found = w.split("=", 1)[1]
    return found


def _local() -> EngineCommand:
    """The local demo target: llama.cpp's server (genbench.local.llamacpp, in a child of its
    own) on genbench's tiny model, built and cached on first use."""
    try:
        import xllamacpp  # noqa: F401
    except ImportError:
        raise UsageError(
            "--serve local needs llama.cpp's Python binding: pip install 'genbench[local]'"
        ) from None
    from genbench.local.llamacpp import default_threads
    from genbench.local.tinymodel import ensure_model

    port = free_port()
    model = str(ensure_model())
    argv = [sys.executable, "-m", "genbench.local.llamacpp", "--model", model, "--port",
            str(port), "--parallel", "64", "--threads", str(default_threads())]  # fmt: skip
    return EngineCommand(argv, port, "127.0.0.1", {"OMP_WAIT_POLICY": "PASSIVE"}, LOCAL)
