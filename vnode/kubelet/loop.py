"""The process's one Twisted reactor (asyncio-based, as Daphne needs it), run on a thread.

Imported by every kubelet module that touches Twisted, so `daphne.server` (which installs
the asyncio reactor) is always imported before anything asks for `twisted.internet.reactor`.
A reactor cannot be restarted: `ensure_running` starts it once per process and it lives
until the process exits; listeners come and go on it.
Tests: tests/vnode/kubelet/test_exec_sessions.py.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast

import daphne.server  # noqa: F401  (installs the asyncio reactor; must come first)
from twisted.internet import defer, threads
from twisted.internet import reactor as _reactor
from twisted.logger import STDLibLogObserver, globalLogBeginner
from twisted.python.failure import Failure

reactor: Any = _reactor  # Twisted's reactor module attribute is untyped for mypy
T = TypeVar("T")
_lock = threading.Lock()
_thread: threading.Thread | None = None


def ensure_running(timeout: float = 10.0) -> None:
    """Start the reactor on a daemon thread unless it already runs."""
    global _thread
    with _lock:
        if _thread is not None:
            return
        observer: Any = STDLibLogObserver("twisted")
        globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False, discardBuffer=True)
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(reactor._asyncioEventloop)
            reactor.callWhenRunning(started.set)
            reactor.run(installSignalHandlers=False)

        _thread = threading.Thread(target=run, name="kubelet-reactor", daemon=True)
        _thread.start()
    if not started.wait(timeout):
        raise RuntimeError("the Twisted reactor did not start")


def on_reactor(function: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
    """Run `function` on the reactor thread and return its result (Deferreds are waited
    for, at most `timeout` seconds: TimeoutError after). Must not be called from the
    reactor thread itself."""
    if timeout is None:
        result: T = threads.blockingCallFromThread(reactor, function, *args)
        return result
    answers: queue.Queue[Any] = queue.Queue()

    def call() -> None:
        defer.maybeDeferred(function, *args).addBoth(answers.put)

    reactor.callFromThread(call)
    try:
        answer = answers.get(timeout=timeout)
    except queue.Empty:
        name = getattr(function, "__name__", function)
        raise TimeoutError(f"the reactor did not finish {name} in {timeout}s") from None
    if isinstance(answer, Failure):
        answer.raiseException()
    return cast(T, answer)


def run_unless(
    coroutine: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop, gone: threading.Event, poll: float
) -> bool:
    """From a thread: run `coroutine` on `loop` and wait for it, giving up (and cancelling
    it) once `gone` is set, looked at every `poll` seconds. True if it completed; its
    exception, if any, is raised."""
    future = asyncio.run_coroutine_threadsafe(coroutine, loop)
    while not gone.is_set():
        try:
            future.result(timeout=poll)
            return True
        except TimeoutError:
            continue
    future.cancel()
    return False


def event_loop() -> asyncio.AbstractEventLoop:
    loop: asyncio.AbstractEventLoop = reactor._asyncioEventloop
    return loop
