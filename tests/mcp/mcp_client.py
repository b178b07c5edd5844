"""Drives kbq's MCP server with the official MCP Python SDK over Streamable HTTP: the tool
list, a call of every tool (the SDK checks each structured result against the tool's output
schema), bad arguments, scopes, memory isolation between keys, a note added, found and
retracted, and refused keys; or over standard input and output, with `kbq mcp` started as a
host starts it.

    python mcp_client.py MCP_URL KEY OTHER_KEY READ_KEY WRITE_ONLY_KEY
    python mcp_client.py --stdio KBQ_BINARY DATA_DIR

MCP_URL is kbq's `/mcp`; kbq must serve the demo knowledge base. KEY and OTHER_KEY have
every scope, READ_KEY only `read`, WRITE_ONLY_KEY only `write`. With --stdio, kbq runs on
an in-memory store with the demo, its data directory DATA_DIR. Prints one line per check
and exits non-zero on the first failure.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

AGENT_TOOLS = [
    "SemanticSearchTool",
    "KnowledgeGraphTool",
    "HybridSearchTool",
    "MemorySearchTool",
    "MemoryStoreTool",
    "MemoryStatsTool",
]
OTHER_TOOLS = ["EntitySearchTool", "EntityLookupTool", "GraphDocumentsTool", "KeywordSearchTool"]
#: Shown to a key with the `write` scope only, as MemoryStoreTool is.
INGEST_TOOLS = ["AddSourceTool", "IngestJobTool", "DeleteSourceTool"]
ALL_TOOLS = AGENT_TOOLS + OTHER_TOOLS + INGEST_TOOLS

#: A good call of each tool, and one whose arguments break the tool's rules.
CALLS = {
    "SemanticSearchTool": ({"query": "codebreaking at Bletchley Park", "limit": 3}, {"query": "x", "limit": 99}),
    "KnowledgeGraphTool": ({"entity": "Alan Turing", "depth": 1}, {"entity": "Alan Turing", "depth": 9}),
    "HybridSearchTool": ({"query": "Who influenced Alan Turing?", "limit": 3}, {"limit": 3}),
    "MemorySearchTool": ({"query": "Enigma"}, {"query": 5}),
    "MemoryStoreTool": ({"content": "The meeting about Enigma is on Tuesday", "tags": ["mcp"]}, {"content": ""}),
    "MemoryStatsTool": ({}, {"unexpected": True}),
    "EntitySearchTool": ({"query": "turing", "limit": 5}, {"query": "turing", "limit": 0}),
    "EntityLookupTool": ({"name": "Alan Turing"}, {"name": ""}),
    "GraphDocumentsTool": ({"entity_name": "Alan Turing", "max_depth": 1, "limit": 3}, {"entity_name": "Alan Turing", "max_depth": 99}),
    "KeywordSearchTool": ({"query": "Enigma", "limit": 2}, {"query": "Enigma", "filters": {"nope": 1}}),
}


def error_of(result):
    """A failed call's error object: kbq sends it as the text (no structured content, which
    a host would check against the tool's output schema)."""
    assert result.structured_content is None, result
    return json.loads(result.content[0].text)


def check(name, condition, detail=""):
    if not condition:
        print(f"FAIL {name}: {detail}")
        sys.exit(1)
    print(f"ok   {name}")


class Session:
    """An initialized MCP session with kbq under one key."""

    def __init__(self, url, key):
        self.url, self.key = url, key

    async def __aenter__(self):
        self._http = create_mcp_http_client(headers={"Authorization": f"Bearer {self.key}"})
        http = await self._http.__aenter__()
        self._streams = streamable_http_client(self.url, http_client=http)
        read, write = (await self._streams.__aenter__())[:2]
        self._session = ClientSession(read, write)
        session = await self._session.__aenter__()
        self.info = await session.initialize()
        return session

    async def __aexit__(self, *exc):
        await self._session.__aexit__(*exc)
        await self._streams.__aexit__(*exc)
        await self._http.__aexit__(*exc)


async def refused(url, key):
    """Why a session with `key` cannot even start, or None when it can."""
    try:
        async with Session(url, key):
            return None
    except BaseException as e:  # the SDK raises from a task group
        return repr(e)


async def a_note(s, label):
    """A note added, its job followed to the end, found by keyword search, then retracted."""
    note = {"source": "notes", "source_id": f"{label}-note", "content": f"The {label} lighthouse keeper saw a comet."}
    r = await s.call_tool("AddSourceTool", note)
    check(f"{label}: a note added", not r.is_error and r.structured_content["status"] == "queued", r)
    job = r.structured_content
    for _ in range(1500):
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        await asyncio.sleep(0.02)
        job = (await s.call_tool("IngestJobTool", {"job_id": job["job_id"]})).structured_content
    check(f"{label}: its job succeeds", job["status"] == "succeeded", job)
    r = await s.call_tool("KeywordSearchTool", {"query": f"{label} lighthouse comet", "limit": 1})
    check(f"{label}: the note is found", r.structured_content["results"][0]["source_id"] == f"{label}-note#0", r)
    r = await s.call_tool("DeleteSourceTool", {"source": "notes", "source_id": f"{label}-note"})
    check(f"{label}: and retracted", r.structured_content == {"deleted": True, "chunks": 1, "entities": 0, "relationships": 0}, r)
    r = await s.call_tool("DeleteSourceTool", {"source": "notes", "source_id": f"{label}-note"})
    check(f"{label}: once", r.is_error and error_of(r)["error_type"] == "not_found", r)


async def every_tool(s, label):
    """The tool list and a good and a bad call of every tool."""
    tools = (await s.list_tools()).tools
    names = [t.name for t in tools]
    check(f"{label}: the tool list", names == ALL_TOOLS, names)
    for name, (good, bad) in CALLS.items():
        r = await s.call_tool(name, good)
        check(f"{label}: {name} answers", not r.is_error and isinstance(r.structured_content, dict), r)
        r = await s.call_tool(name, bad)
        check(f"{label}: {name} refuses bad arguments", r.is_error, r)


async def stdio(binary, data_dir):
    env = {"KBQ_DATA_DIR": data_dir, "RUST_LOG": "warn", "NO_COLOR": "1"}
    params = StdioServerParameters(command=binary, args=["mcp", "--store", "mem://"], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            await every_tool(s, "stdio")
            await a_note(s, "stdio")
            r = await s.call_tool("EntityLookupTool", {"name": "Alan Turing"})
            check("stdio: an exact lookup", r.structured_content["entity"]["name"] == "Alan Turing", r)
            r = await s.call_tool("MemoryStoreTool", {"content": "stdio remembers the lighthouse"})
            check("stdio: the local user stores a memory", r.structured_content.get("stored") is True, r)
            r = await s.call_tool("MemorySearchTool", {"query": "lighthouse"})
            check(
                "stdio: and recalls it",
                any("lighthouse" in x.get("content", "") for x in r.structured_content["results"]),
                r.structured_content,
            )
    print("all checks passed")


async def main():
    if sys.argv[1] == "--stdio":
        return await stdio(sys.argv[2], sys.argv[3])
    url, key, other, read_key, write_key = sys.argv[1:6]

    async with Session(url, key) as s:
        tools = (await s.list_tools()).tools
        names = [t.name for t in tools]
        check("the tool list", names == ALL_TOOLS, names)
        for t in tools:
            check(f"{t.name} has an input schema", t.input_schema.get("type") == "object", t.input_schema)
            check(f"{t.name} has an output schema", (t.output_schema or {}).get("type") == "object", t.output_schema)
            # Adding a source again replaces what it said, so does retracting it: destructive,
            # and idempotent; a memory stored twice is two.
            destructive = t.name in ("AddSourceTool", "DeleteSourceTool")
            read_only = t.name != "MemoryStoreTool" and not destructive
            check(
                f"{t.name}'s annotations",
                t.annotations is not None
                and t.annotations.read_only_hint is read_only
                and t.annotations.idempotent_hint is (t.name != "MemoryStoreTool")
                and t.annotations.destructive_hint is destructive,
                t.annotations,
            )
        for name, (good, bad) in CALLS.items():
            r = await s.call_tool(name, good)
            check(f"{name} answers", not r.is_error and isinstance(r.structured_content, dict), r)
            check(f"{name} answers in text too", r.content and r.content[0].text.startswith("{"), r.content)
            r = await s.call_tool(name, bad)
            check(
                f"{name} refuses bad arguments as a tool error",
                r.is_error and error_of(r)["error_type"] == "invalid_arguments",
                r,
            )
        r = await s.call_tool("EntityLookupTool", {"name": "Alan Turing"})
        check("an exact lookup", r.structured_content["entity"]["properties"]["born"] == 1912, r.structured_content)
        r = await s.call_tool("EntityLookupTool", {"name": "Nobody at all"})
        check("a lookup of no one", r.structured_content == {"entity": None}, r.structured_content)
        r = await s.call_tool("EntitySearchTool", {"query": "turing"})
        found = [e["name"] for e in r.structured_content["results"]]
        check("entity search ranks a prefix before a substring", found.index("Turing machine") < found.index("Alan Turing"), found)
        r = await s.call_tool("GraphDocumentsTool", {"entity_name": "Alan Turing", "max_depth": 99})
        check("a refusal names the field", error_of(r).get("field") == "max_depth", r)
        r = await s.call_tool("NoSuchTool", {})
        check("an unknown tool is a tool error", r.is_error and error_of(r)["error_type"] == "unknown_tool", r)
        r = await s.call_tool("MemoryStoreTool", {"content": "kbq-mcp-secret-42 is the vault code"})
        check("a memory stored", r.structured_content.get("stored") is True, r)
        r = await s.call_tool("MemorySearchTool", {"query": "kbq-mcp-secret-42 vault code"})
        check(
            "the key that stored it recalls it",
            any("kbq-mcp-secret-42" in x.get("content", "") for x in r.structured_content["results"]),
            r.structured_content,
        )
        await a_note(s, "http")

    async with Session(url, other) as s:
        r = await s.call_tool("MemorySearchTool", {"query": "kbq-mcp-secret-42 vault code"})
        check(
            "another key does not",
            all("kbq-mcp-secret-42" not in str(x) for x in r.structured_content["results"]),
            r.structured_content,
        )
        r = await s.call_tool("MemoryStatsTool", {})
        check("another key's memory stats", r.structured_content["memories"] == 0, r.structured_content)

    async with Session(url, read_key) as s:
        names = [t.name for t in (await s.list_tools()).tools]
        writers = ["MemoryStoreTool"] + INGEST_TOOLS
        check("a read key is not shown the tools that write", names == [n for n in ALL_TOOLS if n not in writers], names)
        r = await s.call_tool("EntityLookupTool", {"name": "Alan Turing"})
        check("a read key queries", not r.is_error, r)
        r = await s.call_tool("MemoryStoreTool", {"content": "not allowed"})
        check(
            "a read key cannot store a memory",
            r.is_error and error_of(r)["error_type"] == "insufficient_scope",
            r,
        )
        r = await s.call_tool("AddSourceTool", {"source": "notes", "source_id": "n", "content": "not allowed"})
        check(
            "nor add a source",
            r.is_error and error_of(r)["error_type"] == "insufficient_scope",
            r,
        )

    # The SDK reports an HTTP refusal in more than one way; tests/it/mcp.rs checks the
    # statuses (401, 403) themselves.
    e = await refused(url, "not-a-key")
    check("an unknown key is refused", e is not None, e)
    e = await refused(url, write_key)
    check("a key without the read scope is refused", e is not None, e)
    print("all checks passed")


asyncio.run(main())
