#!/usr/bin/env bash
# End-to-end check of the Aiven S3 sink on the native stack (scripts/stack up first):
# JSON records with schemas -> topic -> AivenKafkaConnectS3SinkConnector (jsonl + gzip) -> MinIO,
# read back through the S3 API (signed requests).
# Creates and deletes its own topic, connector and objects. Exit 0 = the sink works; exit 77
# (skipped) when the stack has no Aiven S3 sink (AIVEN_S3_PLUGIN=unavailable: `scripts/stack up`
# printed how to supply the official release archive).
set -euo pipefail
ROOT="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)"
STACK_CMD="$ROOT/scripts/stack"
eval "$("$STACK_CMD" env)"
if [[ "${AIVEN_S3_PLUGIN:-}" != installed ]]; then
  echo "smoke: SKIP: the Aiven S3 sink plugin is not installed (AIVEN_S3_PLUGIN=${AIVEN_S3_PLUGIN:-unset}); see scripts/stack up" >&2
  exit 77
fi
T="cluecdc-smoke-s3-$$"
N="cluecdc-smoke-s3-$$"
PREFIX="smoke-$$/"
say() { echo "smoke: $*" >&2; }
# s3 METHOD PATH_AND_QUERY [CURL_ARGS...]: one SigV4-signed request to the bucket, body on stdout
# (curl 7.88 does not send x-amz-content-sha256 itself).
s3() {
  local method="$1" path="$2"; shift 2
  curl -fsS --max-time 10 --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
    -H 'x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855' \
    -X "$method" "$@" "$S3_ENDPOINT/$S3_BUCKET$path"
}
keys_under() { # keys_under PREFIX: the object keys (ListObjectsV2, at most 1000; PREFIX of [A-Za-z0-9._/-])
  s3 GET "?list-type=2&prefix=${1//\//%2F}" | grep -o '<Key>[^<]*</Key>' | sed 's/<Key>\(.*\)<\/Key>/\1/' || true
}
cleanup() {
  local k
  curl -sS -o /dev/null -X DELETE "$CONNECT_URL/connectors/$N" || true
  "$STACK_CMD" kafka kafka-topics --delete --topic "$T" >/dev/null 2>&1 || true
  for k in $(keys_under "$PREFIX"); do s3 DELETE "/$k" -o /dev/null || true; done
}
trap cleanup EXIT

say "topic $T"
"$STACK_CMD" kafka kafka-topics --create --topic "$T" --partitions 1 --replication-factor 1 >/dev/null
KS='{"type":"struct","optional":false,"fields":[{"field":"id","type":"int32","optional":false}]}'
VS='{"type":"struct","optional":false,"fields":[{"field":"id","type":"int32","optional":false},{"field":"name","type":"string","optional":true}]}'
for i in 1 2 3; do
  echo "{\"schema\":$KS,\"payload\":{\"id\":$i}}|{\"schema\":$VS,\"payload\":{\"id\":$i,\"name\":\"row-$i\"}}"
done | "$STACK_CMD" kafka kafka-console-producer --topic "$T" \
  --property parse.key=true --property 'key.separator=|' >/dev/null

say "connector $N"
curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/json' "$CONNECT_URL/connectors/$N/config" -d @- <<JSON
{
  "connector.class": "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector",
  "tasks.max": "1",
  "topics": "$T",
  "key.converter": "org.apache.kafka.connect.json.JsonConverter",
  "key.converter.schemas.enable": "true",
  "value.converter": "org.apache.kafka.connect.json.JsonConverter",
  "value.converter.schemas.enable": "true",
  "consumer.override.auto.offset.reset": "earliest",
  "aws.s3.endpoint": "$S3_ENDPOINT",
  "aws.s3.region": "$S3_REGION",
  "aws.s3.bucket.name": "$S3_BUCKET",
  "aws.access.key.id": "$S3_ACCESS_KEY",
  "aws.secret.access.key": "$S3_SECRET_KEY",
  "format.output.type": "jsonl",
  "format.output.fields": "key,value,offset,timestamp",
  "file.compression.type": "gzip",
  "file.name.template": "${PREFIX}{{topic}}/{{partition:padding=true}}-{{start_offset:padding=true}}.jsonl.gz"
}
JSON

for _ in $(seq 1 60); do
  key="$(keys_under "$PREFIX$T/" | grep -m1 '\.jsonl\.gz$' || true)"
  [[ -n "$key" ]] && break
  state="$(curl -sS "$CONNECT_URL/connectors/$N/status" || true)"
  if grep -q '"FAILED"' <<<"$state"; then echo "$state" >&2; say "FAILED"; exit 1; fi
  sleep 1
done
[[ -n "${key:-}" ]] || { curl -sS "$CONNECT_URL/connectors/$N/status" >&2; say "no object after 60s"; exit 1; }
sleep 1
say "object $key"
obj="$(mktemp)"
trap 'rm -f "$obj"; cleanup' EXIT
s3 GET "/$key" -o "$obj" || { say "signed GET of $key failed"; exit 1; }
say "signed GET $key: 200"
gzip -dc "$obj" >&2; echo >&2
last="$(gzip -dc "$obj" | tail -c1 | od -An -tx1 | tr -d ' ')"
say "object ends with a newline: $([[ "$last" == 0a ]] && echo yes || echo "no (last byte 0x$last)")"
gzip -dc "$obj" | python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin if l.strip()]
assert len(lines) == 3, lines
for i, l in enumerate(lines, 1):
    assert l["key"] == {"id": i} and l["value"] == {"id": i, "name": f"row-{i}"}, l
    assert l["offset"] == i - 1 and isinstance(l["timestamp"], str), l
print("smoke: OK:", len(lines), "JSON lines", file=sys.stderr)
'
