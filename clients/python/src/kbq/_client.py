"""The clients: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio), with the same
resources and methods."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Callable, Iterator, Mapping, Optional

import httpx

from . import _base
from . import _operations as _ops
from ._operations import Call
from ._resources import Admin, Agent, Graph, Ingest, Rag
from ._streaming import STREAMS


class _Common:
    graph: Graph
    rag: Rag
    ingest: Ingest
    agent: Agent
    admin: Admin

    def _resources(self) -> None:
        self.graph = Graph(self)
        self.rag = Rag(self)
        self.ingest = Ingest(self)
        self.agent = Agent(self)
        self.admin = Admin(self)

    def key_info(self) -> Any:
        """The calling key (``GET /v1/key``): its name, id, scopes, what it may do, and the
        workspace it works in; never its secret."""
        return self._send(_ops.key_info())

    @property
    def base_url(self) -> str:
        return self._settings.base_url

    @property
    def workspace(self) -> Optional[str]:
        """The workspace named in ``X-KBQ-Workspace`` on every request, or ``None`` (the
        key's own)."""
        return self._settings.workspace


class Client(_Common):
    """A kbq client.

    ``base_url`` defaults to ``KBQ_BASE_URL``, then ``http://127.0.0.1:8080``; ``api_key`` to
    ``KBQ_API_KEY`` (sent as ``Authorization: Bearer``). ``timeout`` is seconds per request
    (60), ``max_retries`` the retries after a 429 or 503 (2; each waits what
    ``Retry-After`` asks, at most ``max_retry_wait`` seconds), for reads and upserts only
    unless a call asks. ``http_client`` replaces the ``httpx.Client`` it would make.

    ``workspace``, for an ``admin`` key of ``default``, names the workspace every request
    acts in (sent as ``X-KBQ-Workspace``); without it a request acts in the key's own
    workspace. Any other key naming a workspace not its own gets ``PermissionDeniedError``
    (code ``workspace_forbidden``).
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        max_retries: Optional[int] = None,
        max_retry_wait: Optional[float] = None,
        default_headers: Optional[Mapping[str, str]] = None,
        http_client: Optional[httpx.Client] = None,
        workspace: Optional[str] = None,
    ) -> None:
        self._settings = _base.Settings(
            base_url, api_key, timeout, max_retries, max_retry_wait, default_headers, workspace
        )
        self._http = http_client or httpx.Client(timeout=self._settings.timeout)
        self._resources()

    def _send_raw(self, call: Call, stream: bool) -> httpx.Response:
        s = self._settings
        attempt = 0
        while True:
            request = self._http.build_request(
                call.method, s.base_url + call.path, **_base.request_args(s, call)
            )
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as e:
                wait = _base.wait_after_failure(s, call, e, attempt)
            else:
                wait = _base.wait_after(s, call, response, attempt)
                if wait is None:
                    return response
                response.close()
            time.sleep(wait)
            attempt += 1

    def _send(self, call: Call) -> Any:
        return _base.result(call, self._send_raw(call, stream=False))

    def _stream(self, call: Call) -> Any:
        response = self._send_raw(call, stream=True)
        if response.status_code >= 400:
            response.read()
            response.close()
            raise _base.error_for(response, _base.json_of(response))
        return STREAMS[call.operation][0](response)

    def _records(self, call: Call) -> Iterator[Any]:
        response = self._send_raw(call, stream=True)
        try:
            if response.status_code >= 400:
                response.read()
                raise _base.error_for(response, _base.json_of(response))
            records = _base.Records()
            for piece in response.iter_bytes():
                yield from records.feed(piece)
            yield from records.finish()
        finally:
            response.close()

    def _poll(self, call: Call, done: Callable[[Any], bool], timeout: Optional[float]) -> Any:
        """Sends ``call`` until ``done`` holds of its answer or ``timeout`` seconds have
        passed; the last answer."""
        poll = _base.Poll(timeout)
        while True:
            answer = self._send(call)
            wait = None if done(answer) else poll.next_wait()
            if wait is None:
                return answer
            time.sleep(wait)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncClient(_Common):
    """:class:`Client` for asyncio: the same arguments and methods, each awaited."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        max_retries: Optional[int] = None,
        max_retry_wait: Optional[float] = None,
        default_headers: Optional[Mapping[str, str]] = None,
        http_client: Optional[httpx.AsyncClient] = None,
        workspace: Optional[str] = None,
    ) -> None:
        self._settings = _base.Settings(
            base_url, api_key, timeout, max_retries, max_retry_wait, default_headers, workspace
        )
        self._http = http_client or httpx.AsyncClient(timeout=self._settings.timeout)
        self._resources()

    async def _send_raw(self, call: Call, stream: bool) -> httpx.Response:
        s = self._settings
        attempt = 0
        while True:
            request = self._http.build_request(
                call.method, s.base_url + call.path, **_base.request_args(s, call)
            )
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as e:
                wait = _base.wait_after_failure(s, call, e, attempt)
            else:
                wait = _base.wait_after(s, call, response, attempt)
                if wait is None:
                    return response
                await response.aclose()
            await asyncio.sleep(wait)
            attempt += 1

    async def _send(self, call: Call) -> Any:
        return _base.result(call, await self._send_raw(call, stream=False))

    async def _stream(self, call: Call) -> Any:
        response = await self._send_raw(call, stream=True)
        if response.status_code >= 400:
            await response.aread()
            await response.aclose()
            raise _base.error_for(response, _base.json_of(response))
        return STREAMS[call.operation][1](response)

    async def _records(self, call: Call) -> AsyncIterator[Any]:
        response = await self._send_raw(call, stream=True)
        try:
            if response.status_code >= 400:
                await response.aread()
                raise _base.error_for(response, _base.json_of(response))
            records = _base.Records()
            async for piece in response.aiter_bytes():
                for record in records.feed(piece):
                    yield record
            for record in records.finish():
                yield record
        finally:
            await response.aclose()

    async def _poll(
        self, call: Call, done: Callable[[Any], bool], timeout: Optional[float]
    ) -> Any:
        poll = _base.Poll(timeout)
        while True:
            answer = await self._send(call)
            wait = None if done(answer) else poll.next_wait()
            if wait is None:
                return answer
            await asyncio.sleep(wait)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
