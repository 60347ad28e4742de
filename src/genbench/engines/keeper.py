"""`python -m genbench.engines.keeper CMD...`: the engine's first process, which takes the
engine's whole process group down when genbench dies.

The kernel's parent-death signal reaches one process: the child genbench started. vLLM's
engine core and workers are that child's children, and survive a SIGKILLed genbench
(measured: `VLLM::EngineCore` and `VLLM::Worker` were still running after it). So genbench
starts this keeper, which starts the engine in its own process group (the keeper's) and
stays beside it: when genbench dies (its parent-death signal, SIGHUP here, or its stdin,
a pipe only genbench holds, closing) it SIGKILLs the group, itself included. Otherwise it
waits for the engine and ends as the engine ended (the same exit status, or the same
signal), so genbench reads the engine's own end. Signals genbench sends go to the whole
group, so the engine gets them directly; the keeper ignores SIGTERM and SIGINT.
"""

from __future__ import annotations

import os
import select
import signal
import sys

PDEATHSIG = signal.SIGHUP


def _kill_group(*_: object) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _watch(child: int) -> int:
    """Wait for the engine; the group is killed if genbench goes first. Its wait status."""
    poller = select.poll()
    poller.register(0, select.POLLHUP | select.POLLERR)
    while True:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            return status
        if os.getppid() == 1 or any(ev & (select.POLLHUP | select.POLLERR)
                                    for _, ev in poller.poll(200)):  # fmt: skip
            _kill_group()


def main(argv: list[str]) -> None:
    parent = int(os.environ.pop("GENBENCH_KEEPER_PARENT", "0"))
    signal.signal(PDEATHSIG, _kill_group)
    if parent and os.getppid() != parent:  # genbench died before we got here
        _kill_group()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    child = os.fork()
    if child == 0:
        for sig in (signal.SIGTERM, signal.SIGINT, PDEATHSIG):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"genbench: cannot run {argv[0]!r}: {e.strerror or e}", file=sys.stderr,
                  flush=True)  # fmt: skip
            os._exit(127)
    code = os.waitstatus_to_exitcode(_watch(child))
    if code < 0:  # end as the engine ended: by the same signal
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
