#!/usr/bin/env python3
"""Creates a connection, a pipeline and a delivery with a Python client that openapi-generator-cli
generated from ClueCDC's OpenAPI document, reads each back, checks its fields, and deletes them.

Only the generated package `cluecdc_client` talks to ClueCDC. Which of its methods serves an
operation is read from the table the generator writes into the client's README (class, method,
HTTP method and path), so nothing here depends on how operations are named; request bodies are
built with the model classes the generated methods declare (`Model.from_dict`).

Run by tests/contract/contract.py, which sets: CLUECDC_URL, CLUECDC_TOKEN, CLIENT_DIR (the
generated sources), CONTRACT_CONNECT_ID, CONTRACT_KAFKA_ID, CONTRACT_DESTINATION_ID (a MinIO
connection), CONTRACT_SCHEMA (a schema with a table `notes`), CONTRACT_RUN, and the stack's
PG_* variables. Exit 0 and `client demo: passed` on success.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import time
import typing
from typing import Any, Callable

import cluecdc_client  # the generated client, installed into this venv by contract.py
from cluecdc_client.exceptions import ApiException

ENV = os.environ
ROW = re.compile(r"^\*(\w+)\* \| \[\*\*(\w+)\*\*\]\([^)]*\) \| \*\*(\w+)\*\* (\S+) \|")


class Check(Exception):
    pass


def log(msg: str) -> None:
    print(f"client demo: {msg}", flush=True)


class Client:
    def __init__(self) -> None:
        config = cluecdc_client.Configuration(host=ENV["CLUECDC_URL"], access_token=ENV["CLUECDC_TOKEN"])
        self.api_client = cluecdc_client.ApiClient(config)
        self.ops: dict[tuple[str, str], tuple[str, str]] = {}
        with open(os.path.join(ENV["CLIENT_DIR"], "README.md"), encoding="utf-8") as f:
            for line in f:
                m = ROW.match(line.strip())
                if m:
                    self.ops[(m[3].upper(), m[4])] = (m[1], m[2])
        if not self.ops:
            raise Check("the generated client's README lists no operations")
        self.apis: dict[str, Any] = {}

    def method(self, http: str, path: str) -> Callable[..., Any]:
        found = self.ops.get((http, path))
        if not found:
            raise Check(f"the generated client has no method for {http} {path}")
        cls, name = found
        if cls not in self.apis:
            self.apis[cls] = getattr(cluecdc_client, cls)(self.api_client)
        return getattr(self.apis[cls], f"{name}_with_http_info")

    def call(self, http: str, path: str, body: Any = None, **params: Any) -> tuple[int, Any]:
        """Calls the generated method for (http, path) with path/query params and a body built
        from the model class the method declares; returns (status, the decoded data as a dict)."""
        fn = self.method(http, path)
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(getattr(fn, "__wrapped__", fn), include_extras=False)
        kwargs: dict[str, Any] = {k: v for k, v in params.items() if k in sig.parameters}
        missing = [k for k in params if k not in sig.parameters]
        if missing:
            raise Check(f"{http} {path}: the generated method takes no parameter {missing} (the document does not declare it)")
        if body is not None:
            names = [n for n in sig.parameters if not n.startswith("_") and n not in params]
            if len(names) != 1:
                raise Check(f"{http} {path}: the generated method takes no request body (parameters {list(sig.parameters)}); "
                            "the document declares none")
            kwargs[names[0]] = build(hints.get(names[0]), body)
        res = fn(**kwargs)
        data = res.data
        if hasattr(data, "to_dict"):
            data = data.to_dict()
        return res.status_code, data


def build(annotation: Any, payload: dict) -> Any:
    """The model instance for a body: the first class in the annotation with from_dict."""
    todo = [annotation]
    while todo:
        t = todo.pop(0)
        if inspect.isclass(t) and hasattr(t, "from_dict"):
            return t.from_dict(payload)
        todo.extend(typing.get_args(t))
    return payload


def expect(what: str, got: Any, want: dict[str, Any]) -> dict:
    if not isinstance(got, dict):
        raise Check(f"{what}: the generated client decoded {type(got).__name__} ({got!r:.200}), not an object: "
                    "the document declares no response schema for it")
    for k, v in want.items():
        if got.get(k) != v:
            raise Check(f"{what}: {k} is {got.get(k)!r}, expected {v!r}")
    return got


def retry_conflict(what: str, fn: Callable[[], Any], timeout: float = 90) -> Any:
    """Deleting a connection waits while its pipeline's deletion is reconciled (409 in use)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except ApiException as e:
            if e.status != 409 or time.monotonic() > deadline:
                raise Check(f"{what}: {e.status} {e.body!s:.500}") from None
            time.sleep(2)


def main() -> int:
    c = Client()
    run = ENV["CONTRACT_RUN"]
    schema = ENV["CONTRACT_SCHEMA"]
    slot = f"contract_{run}_c"
    created: list[tuple[str, str, dict]] = []
    try:
        # a connection
        body = {"name": f"client pg {run}", "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
                "settings": {"host": ENV["PG_HOST_FOR_CLUECDC"], "port": int(ENV["PG_PORT_FOR_CLUECDC"]), "database": ENV["PG_SOURCE_DB"],
                             "user": ENV["PG_USER"], "tls_mode": "disable", "slot_name": slot, "publication_name": slot},
                "secrets": {"password": ENV["PG_PASSWORD"]}}
        status, conn = c.call("POST", "/api/v1/connections", body)
        conn = expect("POST /api/v1/connections", conn, {"name": body["name"], "provider": "POSTGRESQL"})
        created.append(("DELETE", "/api/v1/connections/{id}", {"id": conn["id"]}))
        _, got = c.call("GET", "/api/v1/connections/{id}", id=conn["id"])
        got = expect("GET /api/v1/connections/{id}", got, {"id": conn["id"], "name": body["name"], "provider": "POSTGRESQL",
                                                          "capabilities": ["SOURCE"]})
        if (got.get("settings") or {}).get("database") != ENV["PG_SOURCE_DB"]:
            raise Check(f"GET /api/v1/connections/{{id}}: settings.database is {(got.get('settings') or {}).get('database')!r}")
        if ENV["PG_PASSWORD"] in repr(got) or "password" not in (got.get("secret_fields_set") or []):
            raise Check("GET /api/v1/connections/{id}: the password is returned, or not listed in secret_fields_set")
        log(f"connection {conn['id']} created ({status}) and read back")

        # a pipeline on it
        body = {"name": f"client capture {run}", "source_connection_id": conn["id"], "kafka_cluster_id": ENV["CONTRACT_KAFKA_ID"],
                "connect_cluster_id": ENV["CONTRACT_CONNECT_ID"], "tables": [f"{schema}.notes"], "topic_prefix": f"contract_{run}_c",
                "partitions": 1, "replication_factor": 1}
        status, p = c.call("POST", "/api/v1/pipelines", body)
        p = expect("POST /api/v1/pipelines", p, {})
        p = p.get("pipeline", p)
        created.append(("DELETE", "/api/v1/pipelines/{id}", {"id": p["id"], "drop_slot": True}))
        _, got = c.call("GET", "/api/v1/pipelines/{id}", id=p["id"])
        got = expect("GET /api/v1/pipelines/{id}", got, {})
        got = got.get("pipeline", got)
        expect("GET /api/v1/pipelines/{id}", got, {"id": p["id"], "name": body["name"], "source_connection_id": conn["id"],
                                                   "tables": body["tables"], "topic_prefix": body["topic_prefix"]})
        log(f"pipeline {p['id']} created ({status}) and read back")

        # a delivery of it
        body = {"name": f"client objects {run}", "pipeline_id": p["id"], "destination_connection_id": ENV["CONTRACT_DESTINATION_ID"],
                "compression": "gzip", "records_per_file": 10}
        status, d = c.call("POST", "/api/v1/deliveries", body)
        d = expect("POST /api/v1/deliveries", d, {})
        d = d.get("delivery", d)
        created.append(("DELETE", "/api/v1/deliveries/{id}", {"id": d["id"]}))
        _, got = c.call("GET", "/api/v1/deliveries/{id}", id=d["id"])
        got = expect("GET /api/v1/deliveries/{id}", got, {})
        got = got.get("delivery", got)
        expect("GET /api/v1/deliveries/{id}", got, {"id": d["id"], "name": body["name"], "pipeline_id": p["id"],
                                                    "destination_connection_id": ENV["CONTRACT_DESTINATION_ID"], "kind": "object_storage"})
        log(f"delivery {d['id']} created ({status}) and read back")
    except Exception as e:  # a check, an API error, or the generated client failing to decode
        log(f"FAILED: {type(e).__name__}: {str(e)[:1500]}")
        ok = False
    else:
        ok = True
    for http, path, params in reversed(created):
        try:
            retry_conflict(f"{http} {path}", lambda: c.call(http, path, **params))
            log(f"{http} {path.replace('{id}', params['id'])}: deleted")
        except Exception as e:
            log(f"FAILED: {type(e).__name__}: {str(e)[:1500]}")
            ok = False
    log("passed" if ok else "failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
