"""Run one function in a forked child process under a time and memory limit.

A signal (SIGALRM) is handled between Python bytecodes, so it cannot stop one
long call into C (pdfium loading a page's text, lxml parsing a document); a
child process can be killed whatever it is doing. `run` forks (the child shares
the parent's loaded modules and memory: no interpreter start-up, no imports),
the child calls the function and writes its pickled result or exception to a
pipe, and the parent waits for it until the deadline, then kills the child with
SIGKILL. The child never returns into the caller's code: it leaves by os._exit,
so it runs no atexit handler and closes none of the parent's connections (it
inherits them, and must not touch them: the function must not use the database
or the queue). The worker has other threads when it forks (its heartbeat, the
embedder's pool); the child has only the forking one and takes none of their
locks (CPython and logging reset theirs after a fork).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import pickle
import resource
import selectors
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

_CHUNK = 1 << 20
_PR_SET_PDEATHSIG = 1
_NEAR_LIMIT = 64 * 1024 * 1024  # a failure this close to the memory limit is it


class LimitError(Exception):
    """The child did not deliver a result."""


class TimeLimitExceeded(LimitError):
    pass


class MemoryLimitExceeded(LimitError):
    pass


class ChildDied(LimitError):
    """The child ended without a result (a crash in C code, an outside kill)."""


class _Failure(Exception):
    """Stands for an exception of the child that cannot be pickled."""


def run(
    function: Callable[..., Any],
    *args: Any,
    seconds: float = 0,
    memory_mb: int = 0,
) -> Any:
    """`function(*args)` run in a forked child: its result, or its exception raised
    again here; TimeLimitExceeded once it has run `seconds` (0: no limit, the
    child is waited for), MemoryLimitExceeded when it needed more than
    `memory_mb` MB of address space beyond what the parent already uses (0: no
    limit; a child that aborts under it counts too), ChildDied when it ended
    otherwise."""
    read_end, write_end = os.pipe()
    parent = os.getpid()
    # The child's garbage collector then leaves the parent's objects alone:
    # collecting them would copy every page they are on.
    gc.freeze()
    try:
        pid = os.fork()
    except OSError:
        gc.unfreeze()
        os.close(read_end)
        os.close(write_end)
        raise
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(write_end, function, args, memory_mb, parent)
    gc.unfreeze()
    os.close(write_end)
    try:
        data = _receive(read_end, seconds)
    except BaseException:
        # over the limit, or interrupted here (the job's own timeout): no child
        # is left running or unreaped
        _kill(pid)
        raise
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if not data and memory_mb and _aborted(status):
        # C and C++ libraries abort when an allocation fails (pdfium does, issue
        # #26): under the memory limit, that is the limit
        raise MemoryLimitExceeded(_death(status))
    if not data:
        raise ChildDied(_death(status))
    ok, value = pickle.loads(data)
    if ok:
        return value
    if isinstance(value, MemoryError) and memory_mb:
        raise MemoryLimitExceeded(str(value)) from None
    raise value


def _child(fd: int, function, args, memory_mb: int, parent: int) -> None:
    code = 0
    try:
        limit = _prepare_child(memory_mb, parent)
        start_peak = _peak()  # inherited from the parent
        try:
            outcome = (True, function(*args))
        except Exception as exc:  # sent to the parent, raised there
            # its traceback does not travel with it: as a note, which the
            # parent's log prints (issue #26)
            exc.add_note("In the child process:\n" + _traceback(exc))
            # C libraries report a failed allocation in their own words (lxml: an
            # "unknown error"): near the limit, it is the limit
            margin = min(_NEAR_LIMIT, memory_mb * 1024 * 1024 // 8)
            near = memory_mb and _peak() > max(limit - margin, start_peak)
            outcome = (False, MemoryError() if near else exc)
        try:
            data = pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL)
        except MemoryError as exc:
            outcome = None
            data = pickle.dumps((False, exc), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # an unpicklable result or exception
            failure = _Failure(f"{type(outcome[1]).__name__}: {outcome[1]} ({exc})")
            data = pickle.dumps((False, failure), pickle.HIGHEST_PROTOCOL)
        with open(fd, "wb", closefd=True) as pipe:
            pipe.write(data)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_tb(exc.__traceback__)).rstrip()


def _prepare_child(memory_mb: int, parent: int) -> int:
    # The parent's handlers (rq's, Django's) are not the child's business: a
    # SIGTERM or SIGINT ends it. It also dies with the parent (Linux).
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(signum, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, 0)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl
            os._exit(1)
    if memory_mb <= 0:
        return 0
    limit = _address_space() + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit


def _address_space() -> int:
    """The bytes of address space this process has mapped."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def _peak() -> int:
    """The most bytes of address space this process has had mapped."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    return 0


def _receive(fd: int, seconds: float) -> bytes:
    """Everything the child writes until it closes the pipe, or
    TimeLimitExceeded after `seconds` (read as it comes: a result larger than
    the pipe's buffer would otherwise block the child)."""
    deadline = time.monotonic() + seconds if seconds > 0 else None
    parts: list[bytes] = []
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and (left <= 0 or not selector.select(left)):
                raise TimeLimitExceeded(f"over {seconds:g} s")
            part = os.read(fd, _CHUNK)
            if not part:
                return b"".join(parts)
            parts.append(part)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _aborted(status: int) -> bool:
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGABRT


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"
