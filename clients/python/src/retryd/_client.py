"""retryd.Client (blocking) and retryd.AsyncClient (asyncio)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Optional, TypeVar

import grpc
import grpc.aio

from .errors import REJECTION_CODES
from ._base import _Base
from ._support import Tls, _channel_args
from ._loop import Event, Fallback, Opts, loop
from ._watch import TaskWatch, ThreadWatch
from .mappers import default_mapper
from .v1 import retryd_pb2 as pb
from .v1 import retryd_pb2_grpc as pb_grpc

T = TypeVar("T")
log = logging.getLogger("retryd")


class Client(_Base):
    """Runs calls under retryd's retry loop, blocking.

    `Client(address, *, catalog=None, dependency=None, tenant=None, locale=None,
    timeout=0.05, sleep=time.sleep, tls=None)`; also `connect_timeout` (the
    eager connect at construction), `fallback` (a `Fallback`), `on_event`
    (called with every `Event`, from the mirror's thread for "mirror_stale"
    and "mirror_synced"), `report_interval` (seconds between batched
    ReportOutcomes), `mirror` (default True: admit from a local mirror of the
    fleet's holds, fed by one WatchHolds stream on a background thread) and
    `mirror_max_holds` (default 10 000).
    """

    def __init__(self, address: str, *, catalog: Optional[str] = None, dependency: Optional[str] = None,
                 tenant: Optional[str] = None, locale: Optional[str] = None, timeout: float = 0.05,
                 sleep: Callable[[float], None] = time.sleep, tls: Optional[Tls] = None,
                 connect_timeout: float = 1.0, fallback: Optional[Fallback] = None,
                 on_event: Optional[Callable[[Event], None]] = None, report_interval: float = 1.0,
                 mirror: bool = True, mirror_max_holds: int = 10_000) -> None:
        super().__init__(address, catalog=catalog, dependency=dependency, tenant=tenant, locale=locale,
                         timeout=timeout, tls=tls, connect_timeout=connect_timeout, fallback=fallback,
                         on_event=on_event, report_interval=report_interval, mirror=mirror,
                         mirror_max_holds=mirror_max_holds)
        self._sleep: Callable[[float], None] = sleep
        creds = self._creds()
        args = _channel_args(self._tls)
        self._channel = grpc.secure_channel(address, creds, args) if creds else grpc.insecure_channel(address, args)
        self._stub = pb_grpc.RetryDecisionServiceStub(self._channel)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.connect_timeout)
        except grpc.FutureTimeoutError:
            log.warning("retryd: %s not reachable in %.2f s; calls use the fallback until it is", address, self.connect_timeout)
        self._watch = ThreadWatch(self._stub, self._shed)
        if mirror:
            self._mirror.notify = self._watch.notify
            self._watch.start(self._mirror)

    def watch(self, dependencies: Any = (), tenants: Any = (), timeout: float = 2.0) -> bool:
        """Declares dependencies and tenants this process calls (the client's own are declared
        already) and waits up to `timeout` seconds; True once the mirror's snapshot covers them."""
        if not self._mirror_on:
            return False
        deps = [d for d in [self.dependency, *dependencies] if d]
        tens = [t for t in [self.tenant, *tenants] if t]
        self._mirror.want(deps, tens)
        return self._watch.wait_covered(deps, tens, timeout)

    def call(self, fn: Callable[[], T], *, operation: Optional[str] = None, method: Optional[str] = None,
             idempotency_key: Optional[str] = None, idempotency_key_enforced: bool = False,
             read_back: Optional[Callable[[], Any]] = None,
             to_failure: Optional[Callable[[BaseException], Optional[dict]]] = None,
             deadline: Any = None) -> T:
        """Runs `fn()` under the loop and returns its result (or a read-back's)."""
        o = self._opts(operation, method, idempotency_key, idempotency_key_enforced, read_back, to_failure, deadline)
        gen = loop(o, default_mapper)
        sent: Any = None
        try:
            while True:
                eff = gen.send(sent)
                sent = self._do(o, eff, fn)
        except StopIteration as stop:
            return stop.value
        finally:
            gen.close()
            self._flush(False)

    def _do(self, o: Opts, eff: tuple, fn: Callable[[], Any]) -> Any:
        kind = eff[0]
        if kind == "mirror":
            return self._local(o)
        if kind in ("admit", "classify"):
            skipped = self._busy_skip()
            if skipped is not None:
                return skipped
            rpc = self._stub.Admit if kind == "admit" else self._stub.Classify
            if kind == "admit":
                self._sent("admit")
            try:
                resp = rpc(eff[1], timeout=self._rpc_timeout(o))
                self._answered(o, resp)
                return ("ok", resp)
            except grpc.RpcError as e:
                name = e.code().name  # type: ignore[attr-defined]
                if name in REJECTION_CODES:  # a mistake, not an outage: no fallback
                    return ("rejected", (name, e.details()))  # type: ignore[attr-defined]
                self._shed(e)
                return ("err", f"{name}: {e.details()}")  # type: ignore[attr-defined]
        if kind == "run":
            return self._catch(fn)
        if kind == "read_back":
            return self._catch(o.read_back)  # type: ignore[arg-type]
        if kind == "sleep":
            self._sleep(eff[1])
            return None
        if kind == "event":
            self._event(eff[1])
            return None
        if kind == "count":
            self._counts.add(self._key(o), eff[1])
            return None
        if kind == "report_probe":
            self._sent("report")
            try:
                self._stub.ReportOutcomes(pb.ReportOutcomesRequest(probe_token=eff[1], probe_succeeded=eff[2]),
                                          timeout=self.timeout)
            except grpc.RpcError as e:
                self._shed(e)
            return None
        raise AssertionError(kind)

    @staticmethod
    def _catch(f: Callable[[], Any]) -> tuple:
        try:
            return ("ok", f())
        except Exception as e:  # noqa: BLE001 - the loop maps or re-raises it
            return ("err", e)

    def _flush(self, force: bool) -> None:
        req = self._counts.take(force, self._held_back_fn)
        if req is not None:
            self._sent("report", req)
            fut = self._stub.ReportOutcomes.future(req, timeout=max(self.timeout, 1.0) if force else self.timeout)
            fut.add_done_callback(lambda f: self._reported(f, req))
            if force:
                try:
                    fut.result()
                except grpc.RpcError:
                    pass

    def _reported(self, fut: Any, req: Any) -> None:
        try:
            err = fut.exception()
        except grpc.FutureCancelledError:  # the channel closed under it
            return
        if err is not None and self._shed(err):
            self._counts.put_back(req)  # shed, not lost: the next flush after the advice sends it

    def close(self) -> None:
        """Stops the mirror's watch, sends the outcome counts not yet reported and closes the channel."""
        self._watch.close()
        self._flush(True)
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncClient(_Base):
    """`Client` for asyncio: `await client.call(fn, ...)` with `fn` an async
    callable (or a sync one), `sleep` an async callable (default
    `asyncio.sleep`). Cancelling the task stops the loop at once. The
    mirror's watch runs as tasks on the loop of `connect()` (or the first call)."""

    def __init__(self, address: str, *, catalog: Optional[str] = None, dependency: Optional[str] = None,
                 tenant: Optional[str] = None, locale: Optional[str] = None, timeout: float = 0.05,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, tls: Optional[Tls] = None,
                 connect_timeout: float = 1.0, fallback: Optional[Fallback] = None,
                 on_event: Optional[Callable[[Event], None]] = None, report_interval: float = 1.0,
                 mirror: bool = True, mirror_max_holds: int = 10_000) -> None:
        super().__init__(address, catalog=catalog, dependency=dependency, tenant=tenant, locale=locale,
                         timeout=timeout, tls=tls, connect_timeout=connect_timeout, fallback=fallback,
                         on_event=on_event, report_interval=report_interval, mirror=mirror,
                         mirror_max_holds=mirror_max_holds)
        self._sleep: Callable[[float], Awaitable[None]] = sleep
        creds = self._creds()
        args = _channel_args(self._tls)
        self._channel = grpc.aio.secure_channel(address, creds, args) if creds else grpc.aio.insecure_channel(address, args)
        self._stub = pb_grpc.RetryDecisionServiceStub(self._channel)
        self._connected = False
        self._pending: set[asyncio.Future] = set()
        self._watch = TaskWatch(self._stub, self._shed)

    def _start_watch(self) -> None:
        if self._mirror_on and self._watch.task is None:
            self._mirror.notify = self._watch.notify
            self._watch.start(self._mirror)

    async def watch(self, dependencies: Any = (), tenants: Any = (), timeout: float = 2.0) -> bool:
        """Declares dependencies and tenants this process calls (the client's own are declared
        already) and waits up to `timeout` seconds; True once the mirror's snapshot covers them."""
        if not self._mirror_on:
            return False
        self._start_watch()
        deps = [d for d in [self.dependency, *dependencies] if d]
        tens = [t for t in [self.tenant, *tenants] if t]
        self._mirror.want(deps, tens)
        return await self._watch.wait_covered(deps, tens, timeout)

    async def connect(self) -> bool:
        """Connects now (bounded by connect_timeout) and starts the mirror's watch; True when
        retryd is reachable."""
        self._connected = True
        self._start_watch()
        try:
            await asyncio.wait_for(self._channel.channel_ready(), self.connect_timeout)
            return True
        except asyncio.TimeoutError:
            log.warning("retryd: %s not reachable in %.2f s; calls use the fallback until it is", self.address, self.connect_timeout)
            return False

    async def call(self, fn: Callable[[], Any], *, operation: Optional[str] = None, method: Optional[str] = None,
                   idempotency_key: Optional[str] = None, idempotency_key_enforced: bool = False,
                   read_back: Optional[Callable[[], Any]] = None,
                   to_failure: Optional[Callable[[BaseException], Optional[dict]]] = None,
                   deadline: Any = None) -> Any:
        """Runs `await fn()` under the loop and returns its result (or a read-back's)."""
        if not self._connected:
            await self.connect()
        o = self._opts(operation, method, idempotency_key, idempotency_key_enforced, read_back, to_failure, deadline)
        gen = loop(o, default_mapper)
        sent: Any = None
        try:
            while True:
                eff = gen.send(sent)
                sent = await self._do(o, eff, fn)
        except StopIteration as stop:
            return stop.value
        finally:
            gen.close()
            self._flush(False)

    async def _do(self, o: Opts, eff: tuple, fn: Callable[[], Any]) -> Any:
        kind = eff[0]
        if kind == "mirror":
            return self._local(o)
        if kind in ("admit", "classify"):
            skipped = self._busy_skip()
            if skipped is not None:
                return skipped
            rpc = self._stub.Admit if kind == "admit" else self._stub.Classify
            if kind == "admit":
                self._sent("admit")
            try:
                resp = await rpc(eff[1], timeout=self._rpc_timeout(o))
                self._answered(o, resp)
                return ("ok", resp)
            except grpc.aio.AioRpcError as e:
                name = e.code().name  # type: ignore[attr-defined]
                if name in REJECTION_CODES:  # a mistake, not an outage: no fallback
                    return ("rejected", (name, e.details()))  # type: ignore[attr-defined]
                self._shed(e)
                return ("err", f"{name}: {e.details()}")  # type: ignore[attr-defined]
        if kind == "run":
            return await self._catch(fn)
        if kind == "read_back":
            return await self._catch(o.read_back)  # type: ignore[arg-type]
        if kind == "sleep":
            await self._sleep(eff[1])
            return None
        if kind == "event":
            self._event(eff[1])
            return None
        if kind == "count":
            self._counts.add(self._key(o), eff[1])
            return None
        if kind == "report_probe":
            self._sent("report")
            try:
                await self._stub.ReportOutcomes(pb.ReportOutcomesRequest(probe_token=eff[1], probe_succeeded=eff[2]),
                                                timeout=self.timeout)
            except grpc.aio.AioRpcError as e:
                self._shed(e)
            return None
        raise AssertionError(kind)

    @staticmethod
    async def _catch(f: Callable[[], Any]) -> tuple:
        try:
            r = f()
            if asyncio.iscoroutine(r) or isinstance(r, asyncio.Future):
                r = await r
            return ("ok", r)
        except Exception as e:  # noqa: BLE001 - the loop maps or re-raises it
            return ("err", e)

    def _flush(self, force: bool) -> None:
        req = self._counts.take(force, self._held_back_fn)
        if req is not None:
            self._sent("report", req)

            async def send() -> None:
                try:
                    await self._stub.ReportOutcomes(req, timeout=max(self.timeout, 1.0))
                except grpc.aio.AioRpcError as e:
                    if self._shed(e):
                        self._counts.put_back(req)  # shed, not lost: the next flush after the advice sends it
            t = asyncio.ensure_future(send())
            self._pending.add(t)
            t.add_done_callback(self._pending.discard)

    async def close(self) -> None:
        """Stops the mirror's watch, sends the outcome counts not yet reported and closes the channel."""
        await self._watch.close()
        self._flush(True)
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
