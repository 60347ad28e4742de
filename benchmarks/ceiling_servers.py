"""The servers of the client ceiling benchmark (benchmarks/client_ceiling.py): nginx with a
pre-rendered response (bulk), and benchmarks/stamp_server.py in its own process (tokens)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stamp_server import Render

HERE = Path(__file__).resolve().parent
MODEL = "stamp"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


@contextlib.contextmanager
def nginx(max_tokens: int) -> Iterator[str]:
    """nginx on 127.0.0.1 serving one pre-rendered response to POST /v1/chat/completions.

    A static file goes out with Content-Length, through sendfile, as fast as the socket
    takes it: a client reads many SSE messages per read. (One message per write would
    need a paced server: that is the `tokens` mode.) POST to a static file is answered
    405 by nginx; `error_page 405 =200 $uri` serves the file instead."""
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(exe):
        raise SystemExit("nginx not found: apt-get install -y nginx-light (or --only tokens)")
    tmp = Path(tempfile.mkdtemp(prefix="gb-nginx-"))
    www = tmp / "www/v1/chat"
    www.mkdir(parents=True)
    (www / "completions").write_bytes(b"".join(Render(MODEL, 0).messages(max_tokens, True)))
    port = free_port()
    conf = f"""
user root;
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 16000; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  sendfile on; tcp_nodelay on;
  keepalive_requests 10000000; keepalive_timeout 300;
  types {{ }} default_type text/event-stream;
  server {{
    listen 127.0.0.1:{port} backlog=8192;
    root {tmp}/www;
    location /v1/chat/completions {{ error_page 405 =200 $uri; }}
  }}
}}
"""
    (tmp / "nginx.conf").write_text(conf)
    proc = subprocess.Popen([exe, "-c", str(tmp / "nginx.conf")], stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


class StampServer:
    """benchmarks/stamp_server.py in its own process."""

    def __init__(self, *args: str) -> None:
        cmd = [sys.executable, str(HERE / "stamp_server.py"), "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            self.close()
            raise RuntimeError(f"stamp server did not start: {line!r}")
        self.url = line.split("listening on ")[1].strip()
        self.cpu0 = self.cpu_s()

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stamps(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(self.url.rsplit("/v1", 1)[0] + "/stamps", timeout=60) as r:
            return json.loads(r.read())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> StampServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
