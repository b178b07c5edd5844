"""The client against kbq's OpenAPI document: the types are what the generator makes of the
served document, every operation a client calls has a method, every error code has its
status, and the README's examples run."""

import os
import pathlib
import re
import subprocess
import sys

import httpx

from kbq._operations import PATHS
from kbq._streaming import STATUS_OF_CODE

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: Operations of the document this library leaves to others, each with the reason.
NOT_HERE = {
    "probes_livez": "a probe for load balancers",
    "probes_livez_head": "a probe for load balancers",
    "probes_readyz": "a probe for load balancers",
    "probes_readyz_head": "a probe for load balancers",
    "probes_metrics": "Prometheus scrapes it",
    "docs_openapi_json": "the contract itself",
    "openai_completions": "the official openai client speaks it",
    "openai_embeddings": "the official openai client speaks it",
    "openai_models": "the official openai client speaks it",
}


def document(url):
    return httpx.get(url + "/openapi.json").json()


def test_types_are_generated_from_the_served_document(url, tmp_path):
    path = tmp_path / "openapi.json"
    path.write_bytes(httpx.get(url + "/openapi.json").content)
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "generate_types.py"), str(path)],
        check=True, capture_output=True, text=True,
    ).stdout
    current = (ROOT / "src" / "kbq" / "types.py").read_text()
    assert out == current, (
        "src/kbq/types.py is not what the served document generates: run "
        "python tools/generate_types.py openapi.json > src/kbq/types.py"
    )


def test_every_operation_has_a_method_on_its_path(url):
    served = {}
    for path, ops in document(url)["paths"].items():
        for method, op in ops.items():
            served[op["operationId"]] = (method.upper(), path)
    assert set(served) == set(PATHS) | set(NOT_HERE)
    for op, (method, path) in PATHS.items():
        assert served[op] == (method, path), op


def test_every_error_code_has_its_status(url):
    # A stream's `error` event names a code only: its class comes from this table.
    schema = document(url)["components"]["schemas"]["ErrorCode"]
    assert set(STATUS_OF_CODE) == set(schema["enum"])
    for code, status in STATUS_OF_CODE.items():
        assert f"`{code}` ({status})" in schema["description"], code


def test_the_readme_examples_run(url, key, monkeypatch, tmp_path):
    readme = (ROOT / "README.md").read_text()
    # An example may write a file (a backup): into a directory of the test's own.
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) >= 5
    monkeypatch.setenv("KBQ_BASE_URL", url)
    monkeypatch.setenv("KBQ_API_KEY", key)
    for block in blocks:
        code = block.replace('base_url="http://127.0.0.1:8080", api_key="devkey"', "")
        exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
