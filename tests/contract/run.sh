#!/usr/bin/env bash
# The API contract layer of the test command (issue 31): the committed OpenAPI document is what
# the binary generates and valid OpenAPI 3.1; a live, populated instance on the native stack
# serves it; schemathesis fuzzes every operation; a client generated from it by
# openapi-generator-cli works. The tools install themselves once into the tools cache, pinned:
# the Python ones in tests/contract/requirements.txt (venv named by that file's hash), the
# generator jar here (Maven Central, checked against the SHA-256 below). See contract.py.
#
#   CLUECDC_BIN=target/debug/cluecdc tests/contract/run.sh
#   CONTRACT_MAX_EXAMPLES=20 CONTRACT_MAX_TIME=120 CONTRACT_SEED=N  (defaults 20, 120 s, random)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
TOOLS=${XDG_CACHE_HOME:-$HOME/.cache}/cluecdc/tools
GENERATOR_VERSION=7.25.0
GENERATOR_SHA256=41ce4f6b07f196676439d710759fa1ced7a08066d06ff1bf314681470289efae
GENERATOR_URL=https://repo1.maven.org/maven2/org/openapitools/openapi-generator-cli/$GENERATOR_VERSION/openapi-generator-cli-$GENERATOR_VERSION.jar

die() { echo "contract: $*" >&2; exit 1; }
now() { date +%s%N; }
since() { local ms=$((($(now) - $1) / 1000000)); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }
[ -n "${CLUECDC_BIN:-}" ] || die "CLUECDC_BIN is not set: point it at the built cluecdc binary (the test command does this)"
[ -x "$CLUECDC_BIN" ] || die "no executable cluecdc at $CLUECDC_BIN: cargo build first"
command -v java >/dev/null || die "java is not installed (the generator needs Java 11+; the stack's Connect needs it too)"
[ -n "${KAFKA_BOOTSTRAP:-}" ] || eval "$("$root/scripts/stack" env)" || die "scripts/stack env failed: is the stack up (scripts/stack up)?"

mkdir -p "$TOOLS"
with_lock() { # with_lock NAME CMD...: CMD holding $TOOLS/NAME.lock (as scripts/stack does)
  local name="$1" fd rc; shift
  exec {fd}>"$TOOLS/$name.lock"
  flock "$fd"
  "$@"; rc=$?
  exec {fd}>&-
  return "$rc"
}
system_python() { if [[ -x /usr/bin/python3 ]]; then echo /usr/bin/python3; else command -v python3; fi; }

venv="$TOOLS/contract-venv-$(sha256sum "$here/requirements.txt" | cut -c1-16)"
build_venv() {
  [[ -f "$venv/.complete" ]] && return 0
  echo "contract: installing the pinned Python tools (tests/contract/requirements.txt) into $venv"
  rm -rf "$venv"
  "$(system_python)" -m venv "$venv" || return 1
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt" || return 1
  "$venv/bin/python" -m pip check >/dev/null || { "$venv/bin/python" -m pip check; return 1; }
  touch "$venv/.complete"
}
jar="$TOOLS/openapi-generator-cli-$GENERATOR_VERSION.jar"
fetch_jar() {
  [[ -f "$jar" ]] && echo "$GENERATOR_SHA256  $jar" | sha256sum -c --quiet - 2>/dev/null && return 0
  echo "contract: downloading openapi-generator-cli $GENERATOR_VERSION from Maven Central"
  curl -fsSL --retry 3 -o "$jar.partial" "$GENERATOR_URL" || return 1
  local sha1; sha1=$(curl -fsSL --retry 3 "$GENERATOR_URL.sha1" | cut -c1-40) || return 1
  echo "$sha1  $jar.partial" | sha1sum -c --quiet - || { echo "contract: the jar does not match Maven Central's .sha1"; return 1; }
  echo "$GENERATOR_SHA256  $jar.partial" | sha256sum -c --quiet - || { echo "contract: the jar does not match the pinned SHA-256"; return 1; }
  mv "$jar.partial" "$jar"
}

t=$(now)
if ! [[ -f "$venv/.complete" ]] && ! "$(system_python)" -c 'import ensurepip, venv' 2>/dev/null; then
  [[ $EUID -eq 0 ]] || die "python3-venv is missing and not root: install it first"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >&2 ||
    { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >&2; } ||
    die "apt-get install python3-venv failed"
fi
with_lock contract-venv build_venv || die "building the venv $venv failed (see above)"
echo "contract: tools: venv ready in $(since "$t") s ($venv)"
t=$(now)
with_lock openapi-generator fetch_jar || die "fetching openapi-generator-cli $GENERATOR_VERSION failed (see above)"
echo "contract: tools: openapi-generator-cli $GENERATOR_VERSION ready in $(since "$t") s"

# The generated client is installed into this venv: one contract run at a time on a machine.
exec 9>"$TOOLS/contract-run.lock"
flock 9
export CLUECDC_BIN
exec "$venv/bin/python" "$here/contract.py" --generator-jar "$jar"
