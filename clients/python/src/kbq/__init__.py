"""kbq: the Python client of kbq's v1 API (graph, RAG, ingestion of records and of raw
documents, agent chat and health) and of its admin API (workspaces and their keys).

    import kbq

    client = kbq.Client(base_url="http://127.0.0.1:8080", api_key="devkey")
    result = client.graph.traverse("Alan Turing", depth=1)
    for e in result.entities_found:
        print(e.name, e.depth)

Version 1.x speaks API v1. Chat completions and embeddings are OpenAI-compatible: use the
official ``openai`` client with ``base_url=<kbq>/v1`` for them (docs/clients.md).
"""

from . import types
from ._client import AsyncClient, Client
from . import _errors
from ._errors import *  # noqa: F403 (the error classes, listed in _errors.__all__)
from ._streaming import (
    AsyncChatStream,
    AsyncJobEventStream,
    ChatStream,
    ChatStreamEvent,
    JobEvent,
    JobEventStream,
)
from ._version import __version__

__all__ = [
    "Client",
    "AsyncClient",
    "ChatStream",
    "AsyncChatStream",
    "ChatStreamEvent",
    "JobEventStream",
    "AsyncJobEventStream",
    "JobEvent",
    "types",
    "__version__",
    *_errors.__all__,
]
