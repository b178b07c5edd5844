"""What the sync and async clients share: settings, headers, when and how long to wait
before a retry, deprecation warnings, and turning an answer into a result or an error."""

from __future__ import annotations

import email.utils
import json
import os
import random
import time
import warnings
from typing import Any, List, Mapping, Optional

import httpx

from ._errors import APIConnectionError, APITimeoutError, KbqError, from_body
from ._operations import Call
from ._version import __version__

#: Where kbq listens when neither ``base_url`` nor ``KBQ_BASE_URL`` says.
DEFAULT_BASE_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2
#: The longest wait before one retry, whatever ``Retry-After`` asks.
DEFAULT_MAX_RETRY_WAIT = 30.0
#: Statuses after which kbq did nothing, so that a retry is safe.
RETRY_STATUSES = (429, 503)


class Settings:
    """A client's settings, from its arguments, then the environment, then the defaults."""

    def __init__(
        self,
        base_url: Optional[str],
        api_key: Optional[str],
        timeout: Optional[float],
        max_retries: Optional[int],
        max_retry_wait: Optional[float],
        default_headers: Optional[Mapping[str, str]],
        workspace: Optional[str],
    ) -> None:
        base_url = base_url or os.environ.get("KBQ_BASE_URL") or DEFAULT_BASE_URL
        api_key = api_key if api_key is not None else os.environ.get("KBQ_API_KEY")
        if not api_key:
            raise KbqError(
                "no API key: pass api_key=... or set KBQ_API_KEY (kbq's keys are set on the "
                "server with KBQ_API_KEYS or [[auth.keys]])"
            )
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self.max_retries = DEFAULT_MAX_RETRIES if max_retries is None else max_retries
        if self.max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        self.max_retry_wait = (
            DEFAULT_MAX_RETRY_WAIT if max_retry_wait is None else max_retry_wait
        )
        self.headers = {
            "authorization": f"Bearer {api_key}",
            "user-agent": f"kbq-python/{__version__}",
            "accept": "application/json",
        }
        self.headers.update(default_headers or {})
        self.workspace = workspace
        if workspace is not None:
            self.headers["x-kbq-workspace"] = workspace


def retry_after(response: httpx.Response) -> Optional[float]:
    """Seconds the answer's ``Retry-After`` asks to wait (seconds or an HTTP date)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_wait(settings: Settings, response: Optional[httpx.Response], attempt: int) -> float:
    """How long to wait before retry number ``attempt`` (from 0): what ``Retry-After`` asks,
    else an exponential back-off with jitter; never more than ``max_retry_wait``."""
    asked = retry_after(response) if response is not None else None
    if asked is None:
        asked = min(8.0, 0.5 * 2**attempt) * (0.75 + random.random() / 2)
    return min(asked, settings.max_retry_wait)


def should_retry(settings: Settings, call: Call, response: httpx.Response, attempt: int) -> bool:
    return (
        call.idempotent
        and attempt < settings.max_retries
        and response.status_code in RETRY_STATUSES
        and response.status_code not in call.answer_statuses
    )


def wait_after_failure(
    settings: Settings, call: Call, error: httpx.TransportError, attempt: int
) -> float:
    """Seconds to wait before sending again after no answer came; raises the error to report
    instead when the call is not tried again. Only a failure to connect (nothing was sent) of
    a call that may be repeated is; a timeout never is, as kbq may still be working."""
    if isinstance(error, httpx.TimeoutException):
        raise APITimeoutError(f"no answer within the timeout: {error}") from error
    if isinstance(error, httpx.ConnectError):
        if call.idempotent and attempt < settings.max_retries:
            return retry_wait(settings, None, attempt)
        raise APIConnectionError(f"cannot reach {settings.base_url}: {error}") from error
    raise APIConnectionError(f"the connection failed: {error}") from error


def wait_after(settings: Settings, call: Call, response: httpx.Response, attempt: int) -> Optional[float]:
    """Seconds to wait before sending again after `response`, or None when it is the answer
    (then warned of, if it came from a deprecated version)."""
    if should_retry(settings, call, response, attempt):
        return retry_wait(settings, response, attempt)
    warn_if_deprecated(response)
    return None


def warn_if_deprecated(response: httpx.Response) -> None:
    """A ``DeprecationWarning`` for an answer from a deprecated API version."""
    headers = response.headers
    if headers.get("x-api-deprecated", "").lower() != "true" and "deprecation" not in headers:
        return
    message = f"kbq: {response.request.method} {response.request.url.path} is deprecated"
    if "sunset" in headers:
        message += f"; it will be removed after {headers['sunset']}"
    if "link" in headers:
        message += f" (see {headers['link']})"
    warnings.warn(message, DeprecationWarning, stacklevel=4)


def error_for(response: httpx.Response, body: Any) -> Exception:
    return from_body(
        response.status_code,
        body,
        response.headers.get("x-request-id"),
        retry_after(response),
    )


class Records:
    """The records of a streamed NDJSON answer (an export), read a piece at a time: the
    lines of each piece are parsed as they complete. The answer must end with its ``end``
    record: one that stops before it was cut short, and raises."""

    def __init__(self) -> None:
        self.partial = b""
        self.ended = False

    def feed(self, piece: bytes) -> List[Any]:
        lines = (self.partial + piece).split(b"\n")
        self.partial = lines.pop()
        return [self.record(line) for line in lines if line.strip()]

    def finish(self) -> List[Any]:
        out = [self.record(self.partial)] if self.partial.strip() else []
        if not self.ended:
            raise KbqError("the export stopped before its end record: it is incomplete")
        return out

    def record(self, line: bytes) -> Any:
        if self.ended:
            raise KbqError("the export has a record after its end record")
        record = json.loads(line)
        self.ended = isinstance(record, dict) and record.get("kind") == "end"
        return record


def json_of(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def result(call: Call, response: httpx.Response) -> Any:
    """The call's typed answer, or its error raised."""
    if response.status_code >= 400 and response.status_code not in call.answer_statuses:
        raise error_for(response, json_of(response))
    return call.parse(json_of(response))


def request_args(settings: Settings, call: Call) -> dict:
    headers = dict(settings.headers)
    headers.update(call.headers)
    args: dict = {"headers": headers}
    if call.stream:
        headers["accept"] = "text/event-stream"
    if call.query:
        args["params"] = call.query
    if call.content is not None:
        args["content"] = call.content
    elif call.files is not None:
        args["data"] = call.form
        args["files"] = call.files
    elif call.json is not None:
        args["json"] = call.json
    return args


class Poll:
    """When to read again while waiting for a job to end: after 0.25 s, then twice as long
    each time up to 2 s, until ``timeout`` seconds (``None``: no end) have passed."""

    FIRST = 0.25
    LONGEST = 2.0

    def __init__(self, timeout: Optional[float]) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.wait = self.FIRST

    def next_wait(self) -> Optional[float]:
        """Seconds to wait before the next read, or ``None`` when the time is up."""
        wait, self.wait = self.wait, min(self.wait * 2, self.LONGEST)
        if self.deadline is None:
            return wait
        left = self.deadline - time.monotonic()
        return min(wait, left) if left > 0 else None
