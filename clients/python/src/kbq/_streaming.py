"""Streamed agent chat: server-sent events read into typed :class:`ChatStreamEvent`s.

kbq sends ``tool_call.started`` and ``tool_call.completed`` for each tool call, ``delta`` with
text of the answer, then ``done`` (the whole answer, as ``agent.chat`` returns it) or
``error``, which the stream raises as the :class:`~kbq.APIError` subclass of its code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator, Optional, Union

import httpx

from . import types as t
from ._errors import error_class
from ._models import build

#: Each event's data type, by the event's name.
EVENT_TYPES = {
    "tool_call.started": t.ToolCallStarted,
    "tool_call.completed": t.ToolCallCompleted,
    "delta": t.ChatDelta,
    "done": t.ChatResponse,
}

#: The status each error code answers with (kbq's ErrorCode table).
STATUS_OF_CODE = {
    "invalid_request": 400,
    "INVALID_API_KEY": 401,
    "insufficient_scope": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "version_sunset": 410,
    "payload_too_large": 413,
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


class _Parser:
    """Lines in, events out (the SSE format: ``event:``, ``data:``, blank line ends one)."""

    def __init__(self) -> None:
        self.name: Optional[str] = None
        self.data: list = []

    def line(self, line: str) -> Optional[ChatStreamEvent]:
        if line == "":
            if not self.data:
                self.name = None
                return None
            name, data = self.name or "message", "\n".join(self.data)
            self.name, self.data = None, []
            return _event(name, data)
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


def _event(name: str, data: str) -> ChatStreamEvent:
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
    tp = EVENT_TYPES.get(name)
    return ChatStreamEvent(name, build(tp, payload) if tp else payload)


class ChatStream:
    """The events of a streamed chat, as they come. Iterate it (or call
    :meth:`until_done`); use it as a context manager, or read it to the end, so that its
    connection is released. Closing it early cancels the turn on the server."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.request_id: Optional[str] = response.headers.get("x-request-id")
        #: The whole answer, once the ``done`` event has come.
        self.final: Optional[t.ChatResponse] = None

    def __iter__(self) -> Iterator[ChatStreamEvent]:
        parser = _Parser()
        try:
            for line in self.response.iter_lines():
                event = parser.line(line)
                if event is not None:
                    if event.event == "done":
                        self.final = event.data
                    yield event
        finally:
            self.response.close()

    def until_done(self) -> t.ChatResponse:
        """Reads the rest of the stream; the answer of its ``done`` event."""
        for _ in self:
            pass
        if self.final is None:
            raise error_class(None)("the stream ended without a `done` event")
        return self.final

    def close(self) -> None:
        self.response.close()

    def __enter__(self) -> "ChatStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncChatStream:
    """:class:`ChatStream` for :class:`~kbq.AsyncClient`: iterate it with ``async for``."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.request_id: Optional[str] = response.headers.get("x-request-id")
        self.final: Optional[t.ChatResponse] = None

    async def __aiter__(self) -> AsyncIterator[ChatStreamEvent]:
        parser = _Parser()
        try:
            async for line in self.response.aiter_lines():
                event = parser.line(line)
                if event is not None:
                    if event.event == "done":
                        self.final = event.data
                    yield event
        finally:
            await self.response.aclose()

    async def until_done(self) -> t.ChatResponse:
        async for _ in self:
            pass
        if self.final is None:
            raise error_class(None)("the stream ended without a `done` event")
        return self.final

    async def close(self) -> None:
        await self.response.aclose()

    async def __aenter__(self) -> "AsyncChatStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
