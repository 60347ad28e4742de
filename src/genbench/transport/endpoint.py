"""Where the server is and how to talk to it: base URL, API key, and what the server says of itself.

The API key is held here and nowhere else. It never enters a record, a result,
a log line or an error message: `Endpoint.redact` scrubs it from any text that
came back from the server.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from genbench.errors import UsageError
from genbench.redact import redact, register

DEFAULT_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server: `root` for /health and /metrics, `base_url` for /v1 calls."""

    base_url: str
    root: str
    api_key: str | None = field(default=None, repr=False)
    path_assumed: bool = False  # the user gave no path and we assumed /v1

    @classmethod
    def parse(cls, url: str, api_key: str | None = None) -> Endpoint:
        """Accept `http://host:port`, `http://host:port/v1` or a pasted `.../chat/completions`."""
        raw = url.strip()
        if not raw:
            raise UsageError("--url is empty: expected e.g. http://127.0.0.1:8000/v1")
        if "://" not in raw:
            raise UsageError(f"--url '{raw}' has no scheme: expected http://HOST:PORT/v1")
        try:
            parts = urlsplit(raw)
            port = parts.port
        except ValueError as e:
            raise UsageError(f"--url '{raw}' is not a valid URL ({e})") from None
        if parts.scheme not in ("http", "https"):
            raise UsageError(f"--url '{raw}': scheme must be http or https, not '{parts.scheme}'")
        if not parts.hostname:
            raise UsageError(f"--url '{raw}' has no host: expected http://HOST:PORT/v1")
        host = parts.hostname
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        root = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
        path = parts.path.rstrip("/")
        for suffix in ("/chat/completions", "/completions", "/models"):
            if path.endswith(suffix):
                path = path[: -len(suffix)]
                break
        assumed = False
        if not path:
            path, assumed = "/v1", True
        return cls(base_url=root + path, root=root, api_key=api_key or None, path_assumed=assumed)

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def redact(self, text: str) -> str:
        """Remove the API key from text that may echo it (server error bodies, exceptions)."""
        register(self.api_key)
        return redact(text)


def load_api_key(
    env_var: str | None = DEFAULT_KEY_ENV, key_file: str | Path | None = None
) -> str | None:
    """Read the API key from a file (first line) or an environment variable.

    Never from a flag value: flags end up in shell history and process lists."""
    if key_file is not None:
        p = Path(key_file)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise UsageError(f"--api-key-file '{p}': cannot read it ({e.strerror or e})") from None
        except UnicodeDecodeError:
            raise UsageError(f"--api-key-file '{p}': not UTF-8 text") from None
        key = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not key:
            raise UsageError(f"--api-key-file '{p}' is empty: expected the key on its first line")
        register(key)  # redacted wherever genbench writes from now on
        return key
    if env_var:
        register(key := os.environ.get(env_var) or None)
        return key
    return None


def key_source(env_var: str | None = DEFAULT_KEY_ENV, key_file: str | Path | None = None) -> str:
    """Where `load_api_key` reads the key, as a person sets it (named in a 401's line)."""
    if key_file is not None:
        return f"--api-key-file {key_file}"
    return f"${env_var} (--api-key-env)" if env_var else "no key (--api-key-env '')"


def endpoint(url: str, key_env: str | None, key_file: Path | None) -> Endpoint:
    """The endpoint a command's --url, --api-key-env and --api-key-file name."""
    return Endpoint.parse(url, load_api_key(key_env, key_file))
