"""schemathesis hooks for kbq (loaded by scripts/fuzz through SCHEMATHESIS_HOOKS).

`POST /data/v1/ingest/ndjson` takes `application/x-ndjson`, one JSON record per line, which
schemathesis cannot send by itself: a generated string goes as it is, a generated record or
list of records as one line each.
"""

import json

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, (bytes, bytearray)):
        return {"data": bytes(value)}
    if isinstance(value, str):
        return {"data": value.encode()}
    records = value if isinstance(value, list) else [value]
    return {"data": "".join(json.dumps(r) + "\n" for r in records).encode()}
