"""schemathesis hooks of the API contract layer (loaded through SCHEMATHESIS_HOOKS).

The fuzzer's topics are created on the shared Kafka (one broker, other layers on it): a valid
partition count is kept valid but small, so that a run cannot add tens of thousands of
partitions to it. Invalid values are left alone (the server must refuse them); what the fuzzer
creates is deleted at the end (contract.py's cleanup, from the audit log).

A Kafka cluster record the fuzzer creates or changes with a *valid* address or protocol is
pointed at the stack's own broker over PLAINTEXT (the one way it listens): a valid
`security_protocol: SSL` against a plaintext broker, or a valid-looking address of something
that is not Kafka, makes every later read of that cluster a 502 — a provider failure, rightly
reported as one, but about the fuzzer's choice of address rather than the API. Values of the
wrong type or outside the enum are left alone, so the server's refusal of them is still fuzzed.

The populated fixtures (the ids in CONTRACT_FIXTURE_IDS: the Kafka and Connect cluster records,
the two connections, the pipeline and the delivery) are read by every GET the fuzzer makes, so a
change to them is swapped for an id that does not exist (404) the same way: a fuzzed password on
the source connection would otherwise turn every later table or slot listing into a true 502
(PostgreSQL refusing the password). Changes still run against everything the fuzzer creates.

Its own credentials (the ids in CONTRACT_PROTECTED_IDS: its user and its API token, which it
learns from GET /api/v1/users and /api/v1/tokens) are swapped for an id that does not exist in
any path, so that a PATCH disabling the user or a DELETE revoking the token cannot turn the rest
of the run into 401s; those operations still run, on other ids and on the users it creates.
"""

import os
import re

import schemathesis

TOPIC_CREATE = re.compile(r"^/api/v1/kafka-clusters/[^/]+/topics$")
KAFKA_CLUSTER = {("POST", "/api/v1/kafka-clusters"), ("PATCH", "/api/v1/kafka-clusters/{id}")}
VALID_PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}


PROTECTED = set(os.environ.get("CONTRACT_PROTECTED_IDS", "").split())
FIXTURES = set(os.environ.get("CONTRACT_FIXTURE_IDS", "").split())


@schemathesis.hook
def before_call(context, case, kwargs):
    params = case.path_parameters or {}
    changes = case.method.upper() != "GET"
    for k, v in list(params.items()):
        if isinstance(v, str) and (v in PROTECTED or (changes and v in FIXTURES)):
            params[k] = "protected-by-contract-hooks"
    body = case.body
    if (case.method.upper(), case.operation.path) in KAFKA_CLUSTER and isinstance(body, dict):
        protocol = body.get("security_protocol")
        if isinstance(protocol, str) and protocol in VALID_PROTOCOLS:
            body["security_protocol"] = "PLAINTEXT"
        if isinstance(body.get("bootstrap_servers"), str) and body["bootstrap_servers"].strip():
            body["bootstrap_servers"] = os.environ["KAFKA_BOOTSTRAP"]
    if case.method.upper() != "POST" or not TOPIC_CREATE.match(case.operation.path.replace("{id}", "x")):
        return
    body = case.body
    if isinstance(body, dict):
        p = body.get("partitions")
        if isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 1000:
            body["partitions"] = 1 + p % 3
