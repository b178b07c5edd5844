"""Server-sent events read into typed events: a streamed agent chat and a followed ingestion
job, each one stream class for :class:`~kbq.Client` and one for :class:`~kbq.AsyncClient`.

A chat: kbq sends ``tool_call.started`` and ``tool_call.completed`` for each tool call,
``delta`` with text of the answer, then ``done`` (the whole answer, as ``agent.chat`` returns
it) or ``error``, which the stream raises as the :class:`~kbq.APIError` subclass of its code.

A job: ``progress`` with the job (as ``ingest.job`` returns it) at once and at each change,
then ``end`` with the job as it ended; then kbq closes the stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Dict, Generic, Iterator, Optional, Tuple, TypeVar, Union

import httpx

from . import types as t
from ._errors import error_class
from ._models import build

#: Each chat event's data type, by the event's name.
EVENT_TYPES = {
    "tool_call.started": t.ToolCallStarted,
    "tool_call.completed": t.ToolCallCompleted,
    "delta": t.ChatDelta,
    "done": t.ChatResponse,
}

#: Each job event's data type, by the event's name.
JOB_EVENT_TYPES = {
    "progress": t.JobView,
    "end": t.JobView,
}

#: The status each error code answers with (kbq's ErrorCode table).
STATUS_OF_CODE = {
    "invalid_request": 400,
    "INVALID_API_KEY": 401,
    "insufficient_scope": 403,
    "workspace_forbidden": 403,
    "quota_exceeded": 403,
    "not_found": 404,
    "workspace_not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "conflict": 409,
    "version_sunset": 410,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "RATE_LIMIT_EXCEEDED": 429,
    "internal_error": 500,
    "upstream_error": 502,
    "service_unavailable": 503,
}


@dataclass(frozen=True)
class ChatStreamEvent:
    """One event of a streamed chat: ``event`` names it (``tool_call.started``,
    ``tool_call.completed``, ``delta`` or ``done``) and ``data`` is its typed payload."""

    event: str
    data: Union[t.ToolCallStarted, t.ToolCallCompleted, t.ChatDelta, t.ChatResponse, Any]


@dataclass(frozen=True)
class JobEvent:
    """One event of a followed ingestion job: ``event`` is ``progress`` (the job changed) or
    ``end`` (the job ended; the last event) and ``data`` the job."""

    event: str
    data: t.JobView


#: A stream's event class.
E = TypeVar("E")
#: A stream's own class, for ``with`` and ``async with``.
S = TypeVar("S")


class _Parser:
    """Lines in, (name, data) out (the SSE format: ``event:``, ``data:``, blank line ends one)."""

    def __init__(self) -> None:
        self.name: Optional[str] = None
        self.data: list = []

    def line(self, line: str) -> Optional[Tuple[str, str]]:
        if line == "":
            if not self.data:
                self.name = None
                return None
            name, data = self.name or "message", "\n".join(self.data)
            self.name, self.data = None, []
            return name, data
        if line.startswith(":"):
            return None
        key, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if key == "event":
            self.name = value
        elif key == "data":
            self.data.append(value)
        return None


class _Events:
    """What every stream shares: its events' types, the event that carries the result, and
    reading lines into typed events."""

    #: Data types by event name; an event of another name keeps its parsed JSON.
    TYPES: Dict[str, Any] = {}
    #: The class of each event.
    EVENT: Any = ChatStreamEvent
    #: The name of the event whose data is the result (kept as ``final``).
    FINAL = ""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.request_id: Optional[str] = response.headers.get("x-request-id")
        #: The data of the last event (``done`` of a chat, ``end`` of a job), once it has come.
        self.final: Any = None

    def _take(self, parser: _Parser, line: str) -> Any:
        """The event ``line`` completes, if any (an ``error`` event raised)."""
        got = parser.line(line)
        if got is None:
            return None
        name, data = got
        payload = json.loads(data)
        if name == "error":
            detail = payload.get("error", {}) if isinstance(payload, dict) else {}
            code = detail.get("code")
            status = STATUS_OF_CODE.get(code)
            raise error_class(status)(
                str(detail.get("message", "the stream ended with an error")),
                status_code=status,
                code=code,
                field=detail.get("field"),
                body=payload,
            )
        tp = self.TYPES.get(name)
        event = self.EVENT(name, build(tp, payload) if tp else payload)
        if name == self.FINAL:
            self.final = event.data
        return event

    def _result(self) -> Any:
        if self.final is None:
            raise error_class(None)(f"the stream ended without a `{self.FINAL}` event")
        return self.final


class _Stream(_Events, Generic[E]):
    """Events as they come, for :class:`~kbq.Client`. Iterate it; use it as a context
    manager, or read it to the end, so that its connection is released."""

    def __iter__(self) -> Iterator[E]:
        parser = _Parser()
        try:
            for line in self.response.iter_lines():
                event = self._take(parser, line)
                if event is not None:
                    yield event
        finally:
            self.response.close()

    def _until_final(self) -> Any:
        for _ in self:
            pass
        return self._result()

    def close(self) -> None:
        self.response.close()

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _AsyncStream(_Events, Generic[E]):
    """:class:`_Stream` for :class:`~kbq.AsyncClient`: iterate it with ``async for``."""

    async def __aiter__(self) -> AsyncIterator[E]:
        parser = _Parser()
        try:
            async for line in self.response.aiter_lines():
                event = self._take(parser, line)
                if event is not None:
                    yield event
        finally:
            await self.response.aclose()

    async def _until_final(self) -> Any:
        async for _ in self:
            pass
        return self._result()

    async def close(self) -> None:
        await self.response.aclose()

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class ChatStream(_Stream[ChatStreamEvent]):
    """The events of a streamed chat (:class:`ChatStreamEvent`), as they come. Iterate it (or
    call :meth:`until_done`); use it as a context manager, or read it to the end, so that its
    connection is released. Closing it early cancels the turn on the server. ``final`` is the
    whole answer, once the ``done`` event has come."""

    TYPES = EVENT_TYPES
    EVENT = ChatStreamEvent
    FINAL = "done"
    final: Optional[t.ChatResponse]

    def until_done(self) -> t.ChatResponse:
        """Reads the rest of the stream; the answer of its ``done`` event."""
        return self._until_final()


class AsyncChatStream(_AsyncStream[ChatStreamEvent]):
    """:class:`ChatStream` for :class:`~kbq.AsyncClient`: iterate it with ``async for``."""

    TYPES = EVENT_TYPES
    EVENT = ChatStreamEvent
    FINAL = "done"
    final: Optional[t.ChatResponse]

    async def until_done(self) -> t.ChatResponse:
        return await self._until_final()


class JobEventStream(_Stream[JobEvent]):
    """The events of an ingestion job (:class:`JobEvent`), as they come: ``progress`` at once
    and at each change, then ``end``, after which kbq closes the stream. Iterate it (or call
    :meth:`until_end`); use it as a context manager, or read it to the end. Closing it early
    leaves the job running. ``final`` is the job as it ended, once ``end`` has come."""

    TYPES = JOB_EVENT_TYPES
    EVENT = JobEvent
    FINAL = "end"
    final: Optional[t.JobView]

    def until_end(self) -> t.JobView:
        """Reads the rest of the stream; the job as it ended."""
        return self._until_final()


class AsyncJobEventStream(_AsyncStream[JobEvent]):
    """:class:`JobEventStream` for :class:`~kbq.AsyncClient`: iterate it with ``async for``."""

    TYPES = JOB_EVENT_TYPES
    EVENT = JobEvent
    FINAL = "end"
    final: Optional[t.JobView]

    async def until_end(self) -> t.JobView:
        return await self._until_final()


#: The stream classes (sync, async) of each operation that answers with events.
STREAMS = {
    "agent_chat": (ChatStream, AsyncChatStream),
    "ingest_events": (JobEventStream, AsyncJobEventStream),
}
