"""schemathesis hooks of the API contract layer (loaded through SCHEMATHESIS_HOOKS).

The fuzzer's topics are created on the shared Kafka (one broker, other layers on it): a valid
partition count is kept valid but small, so that a run cannot add tens of thousands of
partitions to it. Invalid values are left alone (the server must refuse them); what the fuzzer
creates is deleted at the end (contract.py's cleanup, from the audit log).

Its own credentials (the ids in CONTRACT_PROTECTED_IDS: its user and its API token, which it
learns from GET /api/v1/users and /api/v1/tokens) are swapped for an id that does not exist in
any path, so that a PATCH disabling the user or a DELETE revoking the token cannot turn the rest
of the run into 401s; those operations still run, on other ids and on the users it creates.
"""

import os
import re

import schemathesis

TOPIC_CREATE = re.compile(r"^/api/v1/kafka-clusters/[^/]+/topics$")


PROTECTED = set(os.environ.get("CONTRACT_PROTECTED_IDS", "").split())


@schemathesis.hook
def before_call(context, case, kwargs):
    params = case.path_parameters or {}
    for k, v in list(params.items()):
        if isinstance(v, str) and v in PROTECTED:
            params[k] = "protected-by-contract-hooks"
    if case.method.upper() != "POST" or not TOPIC_CREATE.match(case.operation.path.replace("{id}", "x")):
        return
    body = case.body
    if isinstance(body, dict):
        p = body.get("partitions")
        if isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 1000:
            body["partitions"] = 1 + p % 3
