"""The pumps feeding the holds mirror from `WatchHolds`: a supervisor that opens a
stream when the mirror wants one (at start, on widening, after a failure with
jittered backoff), and one reader per stream. Threads for the sync Client,
tasks for AsyncClient; every decision is the Mirror's (_mirror.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Optional

import grpc
import grpc.aio

from ._mirror import Mirror


class ThreadWatch:
    """The sync Client's watch: a daemon supervisor thread and a daemon thread per stream
    (grpc's blocking streaming iterator)."""

    def __init__(self, stub: Any, on_error: Callable[[Any], None] = lambda e: None) -> None:
        self.stub = stub
        self.on_error = on_error  # a stream's error, for retryd's shed advice
        self.wake = threading.Event()
        self.closed = threading.Event()
        self.mirror: Optional[Mirror] = None
        self.thread: Optional[threading.Thread] = None

    def start(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self.thread = threading.Thread(target=self._supervise, name="retryd-mirror", daemon=True)
        self.thread.start()

    def notify(self) -> None:
        self.wake.set()

    def _supervise(self) -> None:
        m = self.mirror
        assert m is not None
        while not self.closed.is_set():
            step, secs = m.next_step()
            if step == "wait":
                self.wake.wait(secs)
                self.wake.clear()
                continue
            if step == "backoff" and self.closed.wait(secs):
                break
            gen, req = m.begin(lambda: None)
            call = self.stub.WatchHolds(req)
            m.set_cancel(gen, call.cancel)
            if self.closed.is_set():
                call.cancel()
            threading.Thread(target=self._read, args=(gen, call), name="retryd-watch", daemon=True).start()

    def _read(self, gen: int, call: Any) -> None:
        m = self.mirror
        assert m is not None
        try:
            for ev in call:
                m.on_event(gen, ev)
        except grpc.RpcError as e:
            self.on_error(e)  # the mirror goes stale (if this stream was serving it) and reconnects
        finally:
            m.ended(gen)

    def close(self) -> None:
        self.closed.set()
        self.wake.set()
        if self.mirror is not None:
            for cancel in self.mirror.close():
                cancel()
        if self.thread is not None:
            self.thread.join(1.0)

    def wait_covered(self, deps: list, tenants: list, timeout: float) -> bool:
        assert self.mirror is not None
        end = time.monotonic() + timeout
        while not self.mirror.covers(deps, tenants):
            if time.monotonic() >= end:
                return False
            time.sleep(0.005)
        return True


class TaskWatch:
    """AsyncClient's watch: a supervisor task and a task per stream, on the client's loop."""

    def __init__(self, stub: Any, on_error: Callable[[Any], None] = lambda e: None) -> None:
        self.stub = stub
        self.on_error = on_error  # a stream's error, for retryd's shed advice
        self.wake: Optional[asyncio.Event] = None
        self.closed = False
        self.mirror: Optional[Mirror] = None
        self.task: Optional[asyncio.Task] = None
        self.readers: set[asyncio.Task] = set()

    def start(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self.wake = asyncio.Event()
        self.task = asyncio.ensure_future(self._supervise())

    def notify(self) -> None:
        if self.wake is not None:
            self.wake.set()

    async def _supervise(self) -> None:
        m, wake = self.mirror, self.wake
        assert m is not None and wake is not None
        while not self.closed:
            step, secs = m.next_step()
            if step == "wait":
                try:
                    await asyncio.wait_for(wake.wait(), secs)
                except asyncio.TimeoutError:
                    pass
                wake.clear()
                continue
            if step == "backoff":
                await asyncio.sleep(secs)
                if self.closed:
                    break
            gen, req = m.begin(lambda: None)
            call = self.stub.WatchHolds(req)
            m.set_cancel(gen, call.cancel)
            t = asyncio.ensure_future(self._read(gen, call))
            self.readers.add(t)
            t.add_done_callback(self.readers.discard)

    async def _read(self, gen: int, call: Any) -> None:
        m = self.mirror
        assert m is not None
        try:
            async for ev in call:
                m.on_event(gen, ev)
        except grpc.aio.AioRpcError as e:
            self.on_error(e)  # the mirror goes stale (if this stream was serving it) and reconnects
        except asyncio.CancelledError:
            pass
        finally:
            m.ended(gen)

    async def close(self) -> None:
        self.closed = True
        self.notify()
        if self.mirror is not None:
            for cancel in self.mirror.close():
                cancel()
        tasks = [t for t in [self.task, *self.readers] if t is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_covered(self, deps: list, tenants: list, timeout: float) -> bool:
        assert self.mirror is not None
        end = time.monotonic() + timeout
        while not self.mirror.covers(deps, tenants):
            if time.monotonic() >= end:
                return False
            await asyncio.sleep(0.005)
        return True
