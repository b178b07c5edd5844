"""Each v1 operation once: its method, path, body, whether a retry is safe, and the type of
its answer. The sync and async clients both send these."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union
from urllib.parse import quote

from . import types as t
from ._models import build, dump

#: Paths by operation id of /openapi.json, for the operations this library sends.
PATHS = {
    "graph_traverse": ("POST", "/data/v1/query/graph"),
    "graph_search": ("POST", "/data/v1/query/graph/search"),
    "graph_entity": ("GET", "/data/v1/query/graph/entity/{entity_name}"),
    "graph_documents": ("POST", "/data/v1/query/graph/documents"),
    "graph_merges": ("POST", "/data/v1/query/graph/merges"),
    "graph_stats": ("GET", "/data/v1/query/graph/stats"),
    "rag_semantic": ("POST", "/v1/rag/semantic"),
    "rag_keyword": ("POST", "/v1/rag/keyword"),
    "rag_hybrid": ("POST", "/v1/rag/hybrid"),
    "ingest_entities": ("POST", "/data/v1/ingest/entities"),
    "ingest_relationships": ("POST", "/data/v1/ingest/relationships"),
    "ingest_documents": ("POST", "/data/v1/ingest/documents"),
    "ingest_ndjson": ("POST", "/data/v1/ingest/ndjson"),
    "ingest_delete_entity": ("DELETE", "/data/v1/ingest/entities/{name}"),
    "ingest_delete_document": ("DELETE", "/data/v1/ingest/documents/{id}"),
    "ingest_submit": ("POST", "/data/v1/ingest/sources"),
    "ingest_job": ("GET", "/data/v1/ingest/jobs/{job_id}"),
    "ingest_events": ("GET", "/data/v1/ingest/jobs/{job_id}/events"),
    "ingest_cancel": ("DELETE", "/data/v1/ingest/jobs/{job_id}"),
    "ingest_retract": ("DELETE", "/data/v1/ingest/sources/{source}/{source_id}"),
    "ingest_list": ("GET", "/data/v1/ingest/sources"),
    "agent_chat": ("POST", "/v1/agent/chat"),
    "agent_health": ("GET", "/v1/agent/health"),
    "key_show": ("GET", "/v1/key"),
    "admin_create": ("POST", "/admin/v1/workspaces"),
    "admin_list": ("GET", "/admin/v1/workspaces"),
    "admin_show": ("GET", "/admin/v1/workspaces/{workspace}"),
    "admin_delete": ("DELETE", "/admin/v1/workspaces/{workspace}"),
    "admin_set_quota": ("PUT", "/admin/v1/workspaces/{workspace}/quota"),
    "admin_mint": ("POST", "/admin/v1/workspaces/{workspace}/keys"),
    "admin_keys": ("GET", "/admin/v1/workspaces/{workspace}/keys"),
    "admin_revoke": ("DELETE", "/admin/v1/workspaces/{workspace}/keys/{key_id}"),
    "admin_export": ("GET", "/admin/v1/export"),
}


@dataclass
class Call:
    """One request to send."""

    operation: str
    json: Any = None
    #: Raw body (NDJSON), instead of ``json``.
    content: Optional[bytes] = None
    #: A multipart/form-data body instead: text parts, and file parts as httpx takes them
    #: (``(file_name, bytes, content_type)``), bytes so that a retry sends them again.
    form: Optional[Dict[str, str]] = None
    files: Optional[Dict[str, Any]] = None
    headers: Dict[str, str] = field(default_factory=dict)
    path_params: Dict[str, str] = field(default_factory=dict)
    #: The query string's parameters.
    query: Dict[str, str] = field(default_factory=dict)
    #: Safe to send again after a 429 or 503 (kbq did nothing): every read and upsert.
    idempotent: bool = True
    #: Turns the answer's JSON into the operation's type.
    parse: Callable[[Any], Any] = lambda body: body
    #: Statuses whose body is the answer rather than an error (health's 503).
    answer_statuses: Sequence[int] = ()
    stream: bool = False

    @property
    def method(self) -> str:
        return PATHS[self.operation][0]

    @property
    def path(self) -> str:
        path = PATHS[self.operation][1]
        for name, value in self.path_params.items():
            path = path.replace("{" + name + "}", quote(value, safe=""))
        return path


def _body(**fields: Any) -> Dict[str, Any]:
    """The fields given (not ``None``), dataclasses turned into JSON."""
    return {k: dump(v) for k, v in fields.items() if v is not None}


def _parser(tp: Any) -> Callable[[Any], Any]:
    return lambda body: build(tp, body)


def traverse(
    entity_name: str,
    relationship_types: Optional[Sequence[str]],
    direction: str,
    depth: int,
    limit: int,
) -> Call:
    return Call(
        "graph_traverse",
        json=_body(
            entity_name=entity_name,
            relationship_types=list(relationship_types) if relationship_types is not None else None,
            direction=direction,
            depth=depth,
            limit=limit,
        ),
        parse=_parser(t.TraversalResponse),
    )


def search(query: str, entity_type: Optional[str], limit: int) -> Call:
    return Call(
        "graph_search",
        json=_body(query=query, entity_type=entity_type, limit=limit),
        parse=_parser(t.SearchResponse),
    )


def entity(name: str) -> Call:
    return Call("graph_entity", path_params={"entity_name": name}, parse=_parser(t.Entity))


def documents(
    entity_name: str,
    entity_type: Optional[str],
    relationship_types: Optional[Sequence[str]],
    max_depth: Optional[int],
    limit: Optional[int],
    resolve_documents: Optional[bool],
) -> Call:
    return Call(
        "graph_documents",
        json=_body(
            entity_name=entity_name,
            entity_type=entity_type,
            relationship_types=list(relationship_types) if relationship_types is not None else None,
            max_depth=max_depth,
            limit=limit,
            resolve_documents=resolve_documents,
        ),
        parse=_parser(t.DocumentsResponse),
    )


def merges(entity_name: Optional[str], after: Optional[str], limit: Optional[int]) -> Call:
    return Call(
        "graph_merges",
        json=_body(entity_name=entity_name, after=after, limit=limit),
        parse=_parser(t.MergesResponse),
    )


def stats() -> Call:
    return Call("graph_stats", parse=_parser(t.GraphStats))


Filters = Union[t.Filters, Mapping[str, Any]]


def rag(
    method: str,
    query: str,
    limit: Optional[int],
    filters: Optional[Filters],
    graph_depth: Optional[int] = None,
) -> Call:
    return Call(
        f"rag_{method}",
        json=_body(
            query=query,
            limit=limit,
            filters=dict(filters) if isinstance(filters, Mapping) else filters,
            graph_depth=graph_depth,
        ),
        parse=_parser(t.RagAnswer),
    )


Records = Iterable[Union[Any, Mapping[str, Any]]]


def ingest(kind: str, records: Records) -> Call:
    return Call(
        f"ingest_{kind}",
        json=[dump(r) if not isinstance(r, Mapping) else dict(r) for r in records],
        parse=_parser(t.BatchReport),
    )


def ingest_ndjson(records: Union[bytes, str, Records]) -> Call:
    if isinstance(records, str):
        content = records.encode()
    elif isinstance(records, (bytes, bytearray)):
        content = bytes(records)
    else:
        import json

        content = "".join(
            json.dumps(dump(r) if not isinstance(r, Mapping) else dict(r)) + "\n"
            for r in records
        ).encode()
    return Call(
        "ingest_ndjson",
        content=content,
        headers={"content-type": "application/x-ndjson"},
        parse=_parser(t.NdjsonReport),
    )


def delete_entity(name: str) -> Call:
    return Call(
        "ingest_delete_entity", path_params={"name": name}, parse=_parser(t.EntityDeletion)
    )


def delete_document(id: str) -> Call:
    return Call(
        "ingest_delete_document", path_params={"id": id}, parse=_parser(t.DocumentDeletion)
    )


def submit_source(
    source: str,
    source_id: str,
    content: str,
    content_type: Optional[str],
    title: Optional[str],
    url: Optional[str],
) -> Call:
    # A refused submission (429, 503) started no job, so a retry is safe.
    return Call(
        "ingest_submit",
        json=_body(
            source=source,
            source_id=source_id,
            title=title,
            content=content,
            content_type=content_type,
            url=url,
        ),
        parse=_parser(t.JobView),
    )


#: What ``upload_source`` reads: a path, the bytes themselves, or a file opened in binary mode.
Upload = Union[str, os.PathLike, bytes, bytearray, BinaryIO]


def upload_source(
    file: Upload,
    source: Optional[str],
    source_id: Optional[str],
    title: Optional[str],
    url: Optional[str],
    content_type: Optional[str],
    file_name: Optional[str],
) -> Call:
    if isinstance(file, (bytes, bytearray)):
        content, name = bytes(file), None
    elif isinstance(file, (str, os.PathLike)):
        with open(file, "rb") as f:
            content = f.read()
        name = os.path.basename(os.fspath(file))
    else:
        content = file.read()
        given = getattr(file, "name", None)
        name = os.path.basename(given) if isinstance(given, str) else None
    # Without a content type the server reads the format from the file name's extension.
    part = (file_name or name, content, content_type or "application/octet-stream")
    return Call(
        "ingest_submit",
        form=_body(source=source, source_id=source_id, title=title, url=url),
        files={"file": part},
        parse=_parser(t.JobView),
    )


def job(job_id: str) -> Call:
    return Call("ingest_job", path_params={"job_id": job_id}, parse=_parser(t.JobView))


def job_events(job_id: str) -> Call:
    return Call(
        "ingest_events", path_params={"job_id": job_id}, parse=_parser(t.JobView), stream=True
    )


def cancel_job(job_id: str) -> Call:
    # Cancelling twice answers the job as it ended: safe to retry.
    return Call("ingest_cancel", path_params={"job_id": job_id}, parse=_parser(t.JobView))


def delete_source(source: str, source_id: str) -> Call:
    return Call(
        "ingest_retract",
        path_params={"source": source, "source_id": source_id},
        parse=_parser(t.SourceRetraction),
    )


def list_sources() -> Call:
    return Call("ingest_list", parse=_parser(t.SourceList))


#: The statuses of a job that has ended.
FINAL_STATUSES = ("succeeded", "failed", "cancelled")


History = Sequence[Union[t.HistoryEntry, Mapping[str, Any]]]


def chat(
    message: str,
    system_prompt: Optional[str],
    history: Optional[History],
    temperature: Optional[float],
    max_tokens: Optional[int],
    stream: bool,
    retry: bool,
) -> Call:
    return Call(
        "agent_chat",
        json=_body(
            message=message,
            system_prompt=system_prompt,
            history=[h if isinstance(h, Mapping) else dump(h) for h in history]
            if history is not None
            else None,
            temperature=temperature,
            max_tokens=max_tokens,
            stream=True if stream else None,
        ),
        idempotent=retry,
        parse=_parser(t.ChatResponse),
        stream=stream,
    )


def health() -> Call:
    # 503 is an unhealthy report, not an error; it is not retried either.
    return Call(
        "agent_health",
        parse=_parser(t.HealthReport),
        answer_statuses=(503,),
        idempotent=False,
    )


def key_info() -> Call:
    return Call("key_show", parse=_parser(t.CallingKey))


def create_workspace(name: str, quota: Optional[Mapping[str, int]] = None) -> Call:
    body: dict = {"name": name}
    if quota is not None:
        body["quota"] = dict(quota)
    return Call("admin_create", json=body, parse=_parser(t.WorkspaceView))


def set_workspace_quota(name: str, quota: Mapping[str, int]) -> Call:
    return Call(
        "admin_set_quota",
        path_params={"workspace": name},
        json=dict(quota),
        parse=_parser(t.WorkspaceView),
    )


def list_workspaces() -> Call:
    return Call("admin_list", parse=_parser(t.WorkspaceList))


def get_workspace(name: str) -> Call:
    return Call("admin_show", path_params={"workspace": name}, parse=_parser(t.WorkspaceView))


def delete_workspace(name: str) -> Call:
    return Call(
        "admin_delete", path_params={"workspace": name}, parse=_parser(t.WorkspaceDeletion)
    )


def mint_key(workspace: str, scopes: Sequence[str], name: str) -> Call:
    # Not retried: were a refused mint's key stored after all, a retry would mint a second
    # one, and the first would be live with its secret shown to no one.
    return Call(
        "admin_mint",
        path_params={"workspace": workspace},
        json={"scopes": list(scopes), "name": name},
        idempotent=False,
        parse=_parser(t.MintedKey),
    )


def list_keys(workspace: str) -> Call:
    return Call("admin_keys", path_params={"workspace": workspace}, parse=_parser(t.KeyList))


def revoke_key(workspace: str, key_id: str) -> Call:
    return Call(
        "admin_revoke",
        path_params={"workspace": workspace, "key_id": key_id},
        parse=_parser(t.KeyRevocation),
    )


def export(workspace: Optional[str]) -> Call:
    return Call("admin_export", query={"workspace": workspace} if workspace is not None else {})
