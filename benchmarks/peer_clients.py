"""The peers' streaming clients, measured the same way as genbench's (benchmarks/client_ceiling.py).

Standalone on purpose (stdlib + aiohttp): `vllm` runs under vLLM's own venv.

- `vllm`: `vllm bench serve`'s client for `--backend openai-chat`. Its request function
  (`async_request_openai_chat_completions`, with `StreamedResponseHandler`) is loaded
  from vLLM's source file as is, and driven exactly as `vllm.benchmarks.serve.benchmark`
  drives it: the same `TCPConnector` / `ClientSession` settings, one task per request
  behind an `asyncio.Semaphore(max_concurrency)`, `asyncio.gather`, plain `asyncio.run`
  (vLLM's CLI does not use uvloop for bench serve). Only the CLI around it (tokenizer,
  dataset sampling, metrics) is left out, so the CPU measured is the client's alone.
- `vllm-cli`: the whole `vllm bench serve` command run in-process (see `run_vllm_cli`).
- `urllib`: the field's script: `urllib.request.urlopen` per request (a new connection
  each time: urllib does no keep-alive) in a `ThreadPoolExecutor(C)`, lines iterated from
  the response, `json.loads` on each `data:` line, a `perf_counter()` per chunk.

Each run prints one JSON line: wall and CPU seconds of the measured phase only (imports
and a warm-up request excluded), chunk counts, failures, resident memory, and (with
--arrivals) each request's chunk arrival times for the timing-error comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import resource
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class RssSampler:
    """Resident set size every 50 ms from /proc (no psutil): the peak during the phase."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.base = self.now()
        self.peak = self.base
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> RssSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.now())


class Phase:
    """CPU (user+sys, all threads) and wall time of the measured phase."""

    def __enter__(self) -> Phase:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.ru0 = ru
        self.cpu0 = ru.ru_utime + ru.ru_stime
        self.t0 = time.perf_counter()
        self.rss = RssSampler().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.t1 = time.perf_counter()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu = ru.ru_utime + ru.ru_stime - self.cpu0
        self.sys = ru.ru_stime - self.ru0.ru_stime
        self.rss.__exit__()

    def result(self) -> dict[str, Any]:
        return {
            "t_start": self.t0,
            "t_end": self.t1,
            "wall_s": self.t1 - self.t0,
            "cpu_s": self.cpu,
            "cpu_sys_s": self.sys,
            "rss_base_bytes": self.rss.base,
            "rss_peak_bytes": self.rss.peak,
        }


def wait_for_go() -> None:
    """Say "ready" and wait for a line on stdin, so that several workers start together."""
    print("ready", file=sys.__stdout__, flush=True)
    sys.stdin.readline()


# -- vLLM ---------------------------------------------------------------------------------


def load_vllm_request_module() -> Any:
    """vLLM's endpoint_request_func.py, loaded from its file: it imports only aiohttp,
    regex and tqdm, while `import vllm` would pull in torch (12 s) for nothing."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("vllm is not installed in this interpreter")
    root = list(spec.submodule_search_locations)[0]
    path = os.path.join(root, "benchmarks", "lib", "endpoint_request_func.py")
    mspec = importlib.util.spec_from_file_location("vllm_endpoint_request_func", path)
    assert mspec is not None and mspec.loader is not None
    mod = importlib.util.module_from_spec(mspec)
    sys.modules[mspec.name] = mod
    mspec.loader.exec_module(mod)
    return mod


async def run_vllm(a: argparse.Namespace, keys: list[str]) -> tuple[dict[str, Any], dict]:
    import aiohttp

    m = load_vllm_request_module()
    func = m.async_request_openai_chat_completions
    api_url = a.url.rstrip("/") + "/chat/completions"

    def inp(key: str) -> Any:
        return m.RequestFuncInput(
            prompt=key,
            api_url=api_url,
            prompt_len=4,
            output_len=a.max_tokens,
            model=a.model,
            model_name=a.model,
            ignore_eos=True,
        )

    c = a.concurrency
    # as vllm.benchmarks.serve.benchmark builds them
    connector = aiohttp.TCPConnector(
        limit=c,
        limit_per_host=c,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
        ssl=False,
    )
    session = aiohttp.ClientSession(
        connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
    )
    warm = await func(request_func_input=inp("warmup"), session=session)
    if not warm.success:  # counted in no result: the split check expects some
        print(f"vllm client: warm-up request failed: {warm.error[-300:]}", file=sys.stderr)
    semaphore = asyncio.Semaphore(c)
    wait_for_go()

    async def limited(req: Any) -> Any:
        async with semaphore:
            return await func(request_func_input=req, session=session, pbar=None)

    inputs = [inp(k) for k in keys]
    gc.collect()
    gc.freeze()  # as vllm bench serve does before its run (freeze_gc_heap)
    with Phase() as ph:
        tasks = [asyncio.create_task(limited(r)) for r in inputs]
        outs = await asyncio.gather(*tasks)
    await session.close()
    ok = [o for o in outs if o.success]
    errors = [o.error.strip().splitlines()[-1][:200] for o in outs if not o.success]
    res = ph.result()
    res.update(
        requests=len(outs),
        ok=len(ok),
        failed=len(outs) - len(ok),
        errors=errors[:5],
        # every message with choices after the first (the role chunk) is a token chunk
        chunks=sum(len(o.itl) for o in ok),
        output_tokens=sum(o.output_tokens or 0 for o in ok),
        chars=sum(len(o.generated_text) for o in ok),
        chars_by_key={
            k: len(o.generated_text) for k, o in zip(keys, outs, strict=True) if o.success
        },
    )
    arrivals: dict[str, list[float]] = {}
    if a.arrivals:
        for key, o in zip(keys, outs, strict=True):
            if not o.success:
                continue
            t = o.start_time + o.ttft
            times = [t]
            for gap in o.itl:
                t += gap
                times.append(t)
            arrivals[key] = times[1:]  # drop the role chunk; see the module docstring
    return res, arrivals


def run_vllm_cli(a: argparse.Namespace) -> tuple[dict[str, Any], dict]:
    """The whole `vllm bench serve` (its own CLI entry: argument parsing, tokenizer, random
    dataset, `benchmark()`, metrics), with CPU measured around `benchmark()` only: that
    is the streaming run plus its one ready-check request and the metrics it computes.
    A check that the `vllm` driver above measures what the real command does."""
    import vllm.benchmarks.serve as serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    original = serve.benchmark
    box: dict[str, Any] = {}

    async def timed(*args: Any, **kw: Any) -> Any:
        wait_for_go()
        with Phase() as ph:
            out = await original(*args, **kw)
        box["phase"], box["out"] = ph, dict(out)  # main() deletes the per-request lists
        return out

    serve.benchmark = timed
    root = a.url.rstrip("/").rsplit("/v1", 1)[0]
    argv = [
        "--backend", "openai-chat", "--base-url", root, "--endpoint", "/v1/chat/completions",
        "--model", a.model, "--tokenizer", a.tokenizer, "--dataset-name", "random",
        "--random-input-len", "16", "--random-output-len", str(a.max_tokens),
        "--num-prompts", str(a.requests), "--max-concurrency", str(a.concurrency),
        "--request-rate", "inf", "--ignore-eos", "--disable-tqdm",
    ]  # fmt: skip
    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    stdout = sys.stdout
    sys.stdout = sys.stderr  # its report goes to stderr; stdout carries our JSON line
    try:
        serve.main(parser.parse_args(argv))
    finally:
        sys.stdout = stdout
    ph, out = box["phase"], box["out"]
    res = ph.result()
    errors = [e.strip().splitlines()[-1][:200] for e in out["errors"] if e]
    res.update(
        requests=out["completed"] + out["failed"],
        ok=out["completed"],
        failed=out["failed"],
        errors=errors[:5],
        chunks=sum(len(x) for x, e in zip(out["itls"], out["errors"], strict=True) if not e),
        output_tokens=out["total_output_tokens"],
        chars=sum(
            len(t) for t, e in zip(out["generated_texts"], out["errors"], strict=True) if not e
        ),
    )
    return res, {}


# -- urllib + threads ----------------------------------------------------------------------


def run_urllib(a: argparse.Namespace, keys: list[str]) -> tuple[dict[str, Any], dict]:
    url = a.url.rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json"}

    def one(key: str) -> tuple[str, bool, list[float], str, int, int]:
        payload = {
            "model": a.model,
            "messages": [{"role": "user", "content": key}],
            "max_tokens": a.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers=headers)
        times: list[float] = []
        usage = chars = 0
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                for line in resp:
                    now = time.perf_counter()
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:].strip()
                    if data == b"[DONE]":
                        break
                    chunk = json.loads(data)
                    choices = chunk.get("choices")
                    if choices:
                        delta = choices[0].get("delta") or {}
                        content = delta.get("content")
                        if content or delta.get("reasoning_content") or delta.get("reasoning"):
                            times.append(now)
                            chars += len(content or "")
                    elif chunk.get("usage"):
                        usage = chunk["usage"].get("completion_tokens", 0)
            return key, True, times, "", usage, chars
        except Exception as e:  # noqa: BLE001 - a benchmark counts failures, it does not stop
            return key, False, times, f"{type(e).__name__}: {e}", usage, chars

    warm = one("warmup")
    if not warm[1]:
        print(f"urllib client: warm-up request failed: {warm[3]}", file=sys.stderr)
    wait_for_go()
    with ThreadPoolExecutor(a.concurrency) as ex, Phase() as ph:
        outs = list(ex.map(one, keys))
    ok = [o for o in outs if o[1]]
    res = ph.result()
    res.update(
        requests=len(outs),
        ok=len(ok),
        failed=len(outs) - len(ok),
        errors=[o[3] for o in outs if not o[1]][:5],
        chunks=sum(len(o[2]) for o in ok),
        output_tokens=sum(o[4] for o in ok),
        chars=sum(o[5] for o in ok),
        chars_by_key={o[0]: o[5] for o in ok},
    )
    arrivals = {o[0]: o[2] for o in ok} if a.arrivals else {}
    return res, arrivals


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--client", choices=["vllm", "vllm-cli", "urllib"], required=True)
    p.add_argument("--tokenizer", help="vllm-cli: a tokenizer directory (random dataset)")
    p.add_argument("--url", required=True, help="base URL ending in /v1")
    p.add_argument("--model", default="stamp")
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--prefix", default="r", help="request keys are PREFIX-0, PREFIX-1, ...")
    p.add_argument("--arrivals", help="write {key: [arrival times]} JSON here")
    a = p.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    keys = [f"{a.prefix}-{i}" for i in range(a.requests)]
    if a.client == "vllm":
        res, arrivals = asyncio.run(run_vllm(a, keys))
    elif a.client == "vllm-cli":
        res, arrivals = run_vllm_cli(a)
    else:
        res, arrivals = run_urllib(a, keys)
    res["client"] = a.client
    res["concurrency"] = a.concurrency
    res["procs"] = 1
    if a.arrivals:
        with open(a.arrivals, "w") as f:
            json.dump(arrivals, f)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
