"""The errors a call raises: :class:`APIError` and one subclass per status kbq answers with,
and :class:`APIConnectionError` / :class:`APITimeoutError` when no answer came."""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "KbqError",
    "APIError",
    "APIConnectionError",
    "APITimeoutError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "GoneError",
    "RateLimitError",
    "InternalServerError",
    "ServiceUnavailableError",
]


class KbqError(Exception):
    """Every error this library raises."""


class APIError(KbqError):
    """kbq answered with an error, or (for the subclasses :class:`APIConnectionError` and
    :class:`APITimeoutError`) did not answer.

    ``status_code`` is the HTTP status (``None`` when nothing was answered), ``code`` the
    error body's code (``invalid_request``, ``INVALID_API_KEY``, ...), ``message`` its message,
    ``field`` the request field at fault when there is one, ``request_id`` the answer's
    ``X-Request-Id`` and ``body`` the parsed error body.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: Optional[int] = None,
        code: Optional[str] = None,
        field: Optional[str] = None,
        request_id: Optional[str] = None,
        body: Any = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.field = field
        self.request_id = request_id
        self.body = body
        #: Seconds the answer's ``Retry-After`` asked to wait, when it had one.
        self.retry_after = retry_after

    def __str__(self) -> str:
        parts = [self.message]
        if self.status_code is not None:
            parts.insert(0, f"{self.status_code} {self.code or ''}".rstrip() + ":")
        if self.field:
            parts.append(f"(field `{self.field}`)")
        if self.request_id:
            parts.append(f"[request {self.request_id}]")
        return " ".join(parts)


class APIConnectionError(APIError):
    """kbq could not be reached, or the connection failed before an answer."""


class APITimeoutError(APIConnectionError):
    """No answer within the client's timeout."""


class BadRequestError(APIError):
    """400: a field breaks a rule; ``field`` names it."""


class AuthenticationError(APIError):
    """401: no API key, or one kbq does not know."""


class PermissionDeniedError(APIError):
    """403: the key lacks the scope the route needs (``insufficient_scope``), named a
    workspace not its own (``workspace_forbidden``), or a write would take the workspace
    past its quota (``quota_exceeded``)."""


class NotFoundError(APIError):
    """404: no such route, model, job or source (``not_found``), or no such workspace
    (``workspace_not_found``)."""


class GoneError(APIError):
    """410: the API version is past its sunset."""


class RateLimitError(APIError):
    """429: the key's budget is spent; ``retry_after`` says for how long."""


class InternalServerError(APIError):
    """500 or 502: kbq, or every provider behind it, failed."""


class ServiceUnavailableError(APIError):
    """503: kbq cannot answer now (starting, stopping, the store or every provider down, or
    a pool full); ``retry_after`` says when to try again."""


_BY_STATUS = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    410: GoneError,
    429: RateLimitError,
    500: InternalServerError,
    502: InternalServerError,
    503: ServiceUnavailableError,
}


def error_class(status: Optional[int]) -> type:
    return _BY_STATUS.get(status, APIError) if status is not None else APIError


def from_body(
    status: int, body: Any, request_id: Optional[str], retry_after: Optional[float]
) -> APIError:
    """The error for an answer of ``status`` whose body is ``body`` (kbq's error body, or
    whatever else came)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict):
        message = str(detail.get("message", ""))
        code, field = detail.get("code"), detail.get("field")
    else:
        message, code, field = f"HTTP {status}", None, None
    return error_class(status)(
        message,
        status_code=status,
        code=code,
        field=field,
        request_id=request_id,
        body=body,
        retry_after=retry_after,
    )
