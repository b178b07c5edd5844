"""Drives a running kbq with the official `openai` Python client: models, chat, streaming
chat, a tool-call round trip, embeddings, and the errors for a bad key and an unknown model.

    python openai_client.py BASE_URL API_KEY

BASE_URL is kbq's `/v1` (e.g. http://127.0.0.1:8080/v1). kbq must serve the bundled demo
knowledge base with the built-in provider (the default). Prints one line per check and exits
non-zero on the first failure.
"""

import json
import sys

import openai
from openai import OpenAI

QUESTION = "Who influenced Alan Turing?"


def check(name, condition, detail=""):
    if not condition:
        print(f"FAIL {name}: {detail}")
        sys.exit(1)
    print(f"ok   {name}")


def main():
    base_url, key = sys.argv[1], sys.argv[2]
    # No retries: every answer here is the server's first.
    client = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)

    models = [m.id for m in client.models.list()]
    check("models", models[0] == "kbq" and "kbq-hashing-v1" in models, models)

    reply = client.chat.completions.create(
        model="kbq", messages=[{"role": "user", "content": QUESTION}]
    )
    answer = reply.choices[0].message.content or ""
    check(
        "chat",
        reply.object == "chat.completion"
        and reply.choices[0].finish_reason == "stop"
        and "Kurt Gödel influenced Alan Turing" in answer
        and reply.usage.total_tokens > 0,
        reply,
    )

    stream = client.chat.completions.create(
        model="kbq",
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    check(
        "streaming chat",
        len(pieces) > 1 and "".join(pieces) == answer and finish == "stop" and usage is not None,
        (pieces, finish, usage),
    )

    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup_person",
                "description": "Looks a person up in the caller's own records",
                "parameters": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            },
        }
    ]
    messages = [{"role": "user", "content": "Alan Turing"}]
    first = client.chat.completions.create(
        model="builtin",
        messages=messages,
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "lookup_person"}},
    )
    calls = first.choices[0].message.tool_calls or []
    check(
        "tool call",
        first.choices[0].finish_reason == "tool_calls"
        and len(calls) == 1
        and calls[0].function.name == "lookup_person"
        and json.loads(calls[0].function.arguments) == {"name": "Alan Turing"},
        first,
    )
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append(
        {"role": "tool", "tool_call_id": calls[0].id, "content": "Born 1912 in Maida Vale"}
    )
    second = client.chat.completions.create(model="builtin", messages=messages, tools=tools)
    check(
        "tool result",
        "Born 1912 in Maida Vale" in (second.choices[0].message.content or ""),
        second,
    )

    # The client asks for base64 by default and decodes it; floats on request.
    texts = ["the analytical engine", "Ada Lovelace"]
    b64 = client.embeddings.create(model="kbq-hashing-v1", input=texts)
    floats = client.embeddings.create(
        model="kbq-hashing-v1", input=texts, encoding_format="float"
    )
    check(
        "embeddings",
        len(b64.data) == 2
        and len(b64.data[0].embedding) == 256
        and all(
            abs(a - b) < 1e-6
            for x, y in zip(b64.data, floats.data)
            for a, b in zip(x.embedding, y.embedding)
        )
        and abs(sum(v * v for v in floats.data[1].embedding) - 1.0) < 1e-3,
        b64.data[0].embedding[:4],
    )

    bad = OpenAI(base_url=base_url, api_key="not-a-key", max_retries=0)
    try:
        bad.chat.completions.create(model="kbq", messages=[{"role": "user", "content": "hi"}])
        check("bad key", False, "no error raised")
    except openai.AuthenticationError as e:
        check("bad key", e.status_code == 401 and "key" in str(e).lower(), e)

    try:
        client.chat.completions.create(
            model="gpt-9", messages=[{"role": "user", "content": "hi"}]
        )
        check("unknown model", False, "no error raised")
    except openai.NotFoundError as e:
        check("unknown model", e.status_code == 404 and "gpt-9" in str(e), e)

    try:
        client.chat.completions.create(
            model="kbq", messages=[{"role": "user", "content": "hi"}], temperature=3
        )
        check("bad temperature", False, "no error raised")
    except openai.BadRequestError as e:
        check("bad temperature", e.status_code == 400 and "temperature" in str(e), e)

    print("all checks passed")


if __name__ == "__main__":
    main()
