#!/usr/bin/env bash
# Assembles the Kafka / Kafka Connect runtime from Maven Central, pinned by connect-image/versions.lock:
#
#   OUT/lib/*.jar                       broker + Connect worker + CLI tools classpath
#   OUT/plugins/debezium-connector-*/   the four Debezium plugins (plugin.path=OUT/plugins)
#
# Not here: the Aiven S3 sink (not on Maven Central; its official release archive is installed by
# scripts/stack and by the Dockerfile, see versions.lock) and the ClueCDC config provider (built
# from connect-image/config-provider). Both go into OUT/plugins/<their dir> after this script.
#
# Used by scripts/stack (native test stack) and by connect-image/Dockerfile, so both get the same
# jars after the same checks:
#   - Maven runs with --strict-checksums (Central's own checksums);
#   - every Debezium plugin archive must match its *_PLUGIN_SHA256 in versions.lock;
#   - the Kafka classpath must match the per-jar list kafka/jars.sha256, whose own SHA-256 is
#     pinned in versions.lock (KAFKA_LIBS_SHA256);
#   - no org.apache.kafka jar may end up in a plugin directory.
#
# Usage: assemble.sh [--print-pins] OUT_DIR
#   --print-pins  compute everything, rewrite kafka/jars.sha256 and print the lock lines
#                 instead of failing on a mismatch (for bumping a version; review the diff!).
# Env: MVN (default: mvn), MVN_ARGS (extra Maven arguments, e.g. -o or -Dmaven.repo.local=...).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCK="$HERE/../versions.lock"
PRINT_PINS=0
if [[ "${1:-}" == "--print-pins" ]]; then PRINT_PINS=1; shift; fi
OUT="${1:?usage: assemble.sh [--print-pins] OUT_DIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$OUT/.work"

die() { echo "assemble: ERROR: $*" >&2; exit 1; }
log() { echo "assemble: $*" >&2; }

[[ -f "$LOCK" ]] || die "missing $LOCK"
# shellcheck disable=SC1090
source "$LOCK"
for k in KAFKA_VERSION SCALA_BINARY_VERSION LOG4J_VERSION DEBEZIUM_VERSION; do
  [[ -n "${!k:-}" ]] || die "versions.lock has no $k"
done
DEBEZIUM_CONNECTORS=(postgres mysql mariadb jdbc)

list_jar() { if command -v unzip >/dev/null; then unzip -Z1 "$1"; else jar tf "$1"; fi; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
# "<sha256>  <file name>" for every jar of a directory, sorted by name.
manifest() { (cd "$1" && find . -maxdepth 1 -name '*.jar' -printf '%f\n' | LC_ALL=C sort | xargs -r sha256sum); }

PINS=()
pin() { # pin KEY computed-value what
  local key="$1" got="$2" what="$3" want="${!1:-}"
  PINS+=("$key=$got")
  ((PRINT_PINS)) && return 0
  [[ -n "$want" ]] || die "versions.lock has no $key (for $what); run '$0 --print-pins DIR' and add it"
  [[ "$want" == "$got" ]] || die "SHA-256 mismatch for $what: versions.lock $key=$want, got $got"
}

# Compares a computed per-jar list with the committed one, naming every jar that differs.
check_list() { # check_list committed-list computed-list KEY what
  local committed="$1" computed="$2" key="$3" what="$4"
  if ((PRINT_PINS)); then
    cp "$computed" "$committed"
  elif ! cmp -s "$committed" "$computed"; then
    echo "assemble: the $what jars differ from $committed:" >&2
    diff "$committed" "$computed" | grep '^[<>]' | sed 's/^</  pinned: /; s/^>/  got:    /' >&2 || true
    die "checksum mismatch in $what (computed list: $computed)"
  fi
  pin "$key" "$(sha "$committed")" "$committed"
}

# 1. Maven: Kafka classpath and Debezium archives.
rm -rf "${WORK:?}/lib" "${WORK:?}/archives" "${WORK:?}/maven-out"
log "resolving with Maven (Kafka $KAFKA_VERSION, Debezium $DEBEZIUM_VERSION)"
# shellcheck disable=SC2086
if ! "${MVN:-mvn}" -B -q -C ${MVN_ARGS:-} -f "$HERE/pom.xml" \
    -Dcluecdc.out="$WORK" \
    -Dkafka.version="$KAFKA_VERSION" -Dscala.binary.version="$SCALA_BINARY_VERSION" \
    -Dlog4j.version="$LOG4J_VERSION" \
    -Ddebezium.version="$DEBEZIUM_VERSION" \
    package >"$WORK.maven.log" 2>&1; then
  tail -n 40 "$WORK.maven.log" >&2
  die "Maven failed; full log: $WORK.maven.log"
fi

# 2. Checks.
manifest "$WORK/lib" >"$WORK/kafka-jars.sha256"
check_list "$HERE/kafka/jars.sha256" "$WORK/kafka-jars.sha256" KAFKA_LIBS_SHA256 "Kafka classpath (lib)"

for c in "${DEBEZIUM_CONNECTORS[@]}"; do
  f="$WORK/archives/debezium-connector-$c-$DEBEZIUM_VERSION-plugin.tar.gz"
  [[ -f "$f" ]] || die "Maven did not fetch $(basename "$f")"
  pin "DEBEZIUM_${c^^}_PLUGIN_SHA256" "$(sha "$f")" "io.debezium:debezium-connector-$c:$DEBEZIUM_VERSION:tar.gz:plugin"
done

if ((PRINT_PINS)); then
  echo "# computed pins for versions.lock (kafka/jars.sha256 rewritten):"
  printf '%s\n' "${PINS[@]}"
  exit 0
fi

# 3. Lay out lib/ and plugins/ (replace atomically so a failed run leaves the previous state).
NEW="$OUT/.new"
rm -rf "$NEW" && mkdir -p "$NEW/plugins"
cp -a "$WORK/lib" "$NEW/lib"
for c in "${DEBEZIUM_CONNECTORS[@]}"; do
  tar -xzf "$WORK/archives/debezium-connector-$c-$DEBEZIUM_VERSION-plugin.tar.gz" -C "$NEW/plugins"
done
# Debezium archives bundle kafka-clients and connect-api; the worker provides those (and Connect
# loads org.apache.kafka classes from its own class loader anyway), so drop them.
find "$NEW/plugins" -name '*.jar' -regextype posix-extended \
  -regex '.*/(kafka-clients|kafka-[a-z-]+|kafka_2\.[0-9]+|connect-(api|runtime|json|transforms|file|mirror[a-z-]*))-[0-9][^/]*\.jar' -delete
bad="$(find "$NEW/plugins" -name '*.jar' | while read -r j; do
  list_jar "$j" | grep -q '^org/apache/kafka/\(clients\|common\|connect/\(connector\|data\|sink\|source\|storage\|errors\|header\)\)/' && echo "$j"
done || true)"
[[ -z "$bad" ]] || die "org.apache.kafka classes found in plugin jars: $bad"
for d in lib plugins; do rm -rf "${OUT:?}/$d"; mv "$NEW/$d" "$OUT/$d"; done
rm -rf "$NEW" "$WORK"
log "assembled $OUT/lib ($(find "$OUT/lib" -name '*.jar' | wc -l) jars) and $OUT/plugins ($(ls "$OUT/plugins" | tr '\n' ' '))"
