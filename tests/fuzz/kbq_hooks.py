"""schemathesis hooks for kbq (loaded by scripts/fuzz through SCHEMATHESIS_HOOKS).

`POST /data/v1/ingest/ndjson` takes `application/x-ndjson`, one JSON record per line, which
schemathesis cannot send by itself. The document describes the body as an array of records;
each generated record goes as one line. A generated value of another shape (a negative
case) goes as one line too, and a string as it is.
"""

import json

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    records = value if isinstance(value, list) else [value]
    return "".join(json.dumps(r) + "\n" for r in records).encode()


@schemathesis.hook
def filter_body(ctx, body):
    """Two rules of `POST /v1/chat/completions` that JSON Schema cannot say, and the document
    says in words: tool names are unique, and a named `tool_choice` names one of the tools.
    A generated body that breaks them is not generated (the server refuses it with 400).

    And a multipart upload (`POST /data/v1/ingest/sources`, the body with a `file`) whose
    text parts are not text: a part of `multipart/form-data` is text whatever was generated
    (`false` goes as the string "false"), so such a body cannot be sent as itself, and the
    server rightly takes the string it gets."""
    if isinstance(body, dict) and "file" in body:
        return all(v is None or isinstance(v, str) for k, v in body.items() if k != "file")
    if not isinstance(body, dict) or not isinstance(body.get("tools"), list):
        return True
    names = [
        t["function"].get("name")
        for t in body["tools"]
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    names = [n for n in names if isinstance(n, str)]
    if len(names) != len(set(names)):
        return False
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        named = choice["function"].get("name")
        if isinstance(named, str) and named not in names:
            return False
    return True
