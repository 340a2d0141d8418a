#!/usr/bin/env bash
# End-to-end check of the Debezium source connectors on the native stack (scripts/stack up first):
# PostgreSQL (pgoutput, filtered publication, non-superuser cdc_user) and MariaDB (row binlog):
# create a table, start the connector, insert a row, read the change event from Kafka.
# Cleans up its connectors, topics, slot, publication and tables. Exit 0 = both work.
set -euo pipefail
ROOT="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)"
STACK_CMD="$ROOT/scripts/stack"
eval "$("$STACK_CMD" env)"
ID="smoke$$"
say() { echo "smoke: $*" >&2; }
psql_() { PGPASSWORD="$PG_PASSWORD" psql -X -q -v ON_ERROR_STOP=1 -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -d "$PG_SOURCE_DB" "$@"; }
maria_() { mariadb --no-defaults -h "$MARIADB_HOST" -P "$MARIADB_PORT" -u "$MARIADB_USER" -p"$MARIADB_PASSWORD" "$MARIADB_DB" "$@"; }
cleanup() {
  for c in "$ID-pg" "$ID-mdb"; do curl -sS -o /dev/null -X DELETE "$CONNECT_URL/connectors/$c" || true; done
  sleep 2
  psql_ -c "SELECT pg_drop_replication_slot('$ID') FROM pg_replication_slots WHERE slot_name = '$ID'" \
    -c "DROP PUBLICATION IF EXISTS ${ID}_pub" -c "DROP TABLE IF EXISTS public.$ID" >/dev/null 2>&1 || true
  maria_ -e "DROP TABLE IF EXISTS $ID" 2>/dev/null || true
  "$STACK_CMD" kafka kafka-topics --delete --topic "$ID-.*" >/dev/null 2>&1 || true
}
trap cleanup EXIT
put() { curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/json' "$CONNECT_URL/connectors/$1/config" -d "$2"; }
consume() { # consume TOPIC: first record's value, or fail after 60s
  timeout 90 "$STACK_CMD" kafka kafka-console-consumer --topic "$1" --from-beginning --max-messages 1 \
    --timeout-ms 60000 2>/dev/null
}
check() { # check NAME TOPIC
  local out
  out="$(consume "$2" || true)"
  if ! grep -q "\"name\":\"row-1\"" <<<"$out"; then
    curl -sS "$CONNECT_URL/connectors/$1/status" >&2; echo >&2
    say "$1: no change event on $2"; exit 1
  fi
  say "$1: change event on $2: $(python3 -c 'import json,sys; p=json.loads(sys.stdin.read())["payload"]; print("op=%s after=%s" % (p["op"], p["after"]))' <<<"$out")"
}

psql_ -c "CREATE TABLE public.$ID (id int PRIMARY KEY, name text)"
put "$ID-pg" "{\"connector.class\":\"io.debezium.connector.postgresql.PostgresConnector\",\"tasks.max\":\"1\",
  \"database.hostname\":\"$PG_HOST\",\"database.port\":\"$PG_PORT\",\"database.user\":\"$PG_USER\",
  \"database.password\":\"$PG_PASSWORD\",\"database.dbname\":\"$PG_SOURCE_DB\",\"topic.prefix\":\"$ID-pg\",
  \"plugin.name\":\"pgoutput\",\"slot.name\":\"$ID\",\"publication.name\":\"${ID}_pub\",
  \"publication.autocreate.mode\":\"filtered\",\"table.include.list\":\"public.$ID\",\"snapshot.mode\":\"no_data\"}"
maria_ -e "CREATE TABLE $ID (id INT PRIMARY KEY, name VARCHAR(64))"
put "$ID-mdb" "{\"connector.class\":\"io.debezium.connector.mariadb.MariaDbConnector\",\"tasks.max\":\"1\",
  \"database.hostname\":\"$MARIADB_HOST\",\"database.port\":\"$MARIADB_PORT\",\"database.user\":\"$MARIADB_USER\",
  \"database.password\":\"$MARIADB_PASSWORD\",\"database.server.id\":\"$((5000 + $$ % 1000))\",\"topic.prefix\":\"$ID-mdb\",
  \"database.include.list\":\"$MARIADB_DB\",\"table.include.list\":\"$MARIADB_DB.$ID\",\"snapshot.mode\":\"no_data\",
  \"schema.history.internal.kafka.bootstrap.servers\":\"$KAFKA_BOOTSTRAP\",\"schema.history.internal.kafka.topic\":\"$ID-mdb.history\"}"
for c in "$ID-pg" "$ID-mdb"; do
  for _ in $(seq 1 60); do
    curl -sS "$CONNECT_URL/connectors/$c/status" 2>/dev/null | grep -q '"tasks":\[{"id":0,"state":"RUNNING"' && break
    sleep 1
  done
done
sleep 5 # let the streaming start after the (empty) snapshot
psql_ -c "INSERT INTO public.$ID VALUES (1, 'row-1')"
maria_ -e "INSERT INTO $ID VALUES (1, 'row-1')"
check "$ID-pg" "$ID-pg.public.$ID"
check "$ID-mdb" "$ID-mdb.$MARIADB_DB.$ID"
say "OK"
