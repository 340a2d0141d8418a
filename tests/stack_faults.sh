#!/usr/bin/env bash
# Stops each component of the native data plane in turn and checks that the smoke tests then
# fail with a message naming that component; starts it again after each. Runs after the other
# layers (it takes the stack down), from scripts/test.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cluecdc/target}
eval "$(scripts/stack env)"

bin=$(cargo test --locked --test it --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "it":
        print(m["executable"])' | tail -1)
[ -x "$bin" ] || { echo "cannot find the integration test binary"; exit 1; }

passed=0
failed=0
# component (as scripts/stack names it) and the name its smoke test failure must carry
for pair in "s3:S3" "postgres:PostgreSQL" "shop:Shop" "mariadb:MariaDB" "mysql:MySQL" "kafka:Kafka" "connect:Connect"; do
  component=${pair%%:*}
  name=${pair#*:}
  scripts/stack down "$component" >/dev/null 2>&1
  out=$("$bin" stack_smoke --test-threads=1 2>&1)
  code=$?
  if [ $code -ne 0 ] && grep -q "$name at .* is not answering" <<<"$out"; then
    echo "ok: with $component stopped, a smoke test fails naming $name"
    passed=$((passed + 1))
  else
    echo "FAIL: with $component stopped, no smoke test failed naming $name (exit $code)"
    echo "$out" | grep -E "panicked|not answering|test result" | head -10
    failed=$((failed + 1))
  fi
  scripts/stack up >/dev/null 2>&1 || { echo "scripts/stack up failed after stopping $component"; scripts/stack status; exit 1; }
done
# Everything is back: the smoke tests pass again.
if "$bin" stack_smoke --test-threads=1 >/dev/null 2>&1; then
  echo "ok: with every component back, the smoke tests pass"
  passed=$((passed + 1))
else
  echo "FAIL: the smoke tests do not pass after restarting the stack"
  failed=$((failed + 1))
fi
# A second stack (a copy of the scripts in a temporary checkout) started while this one holds
# every default port: its first `up` moves all its ports by one offset, says which process held
# the default, and serves on the moved port; this stack keeps answering on its own.
other=$(mktemp -d)
mkdir -p "$other/scripts" "$other/connect-image"
cp -r scripts/stack scripts/stack.d "$other/scripts/"
cp connect-image/versions.lock "$other/connect-image/"
up_out=$("$other/scripts/stack" up hooks 2>&1)
other_hooks=$(eval "$("$other/scripts/stack" env)" && echo "$HOOKS_URL")
# The hooks stand-in answers 404 to GET /: an answer over TLS is what is checked.
answers() { [ "$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$1" "$2/" 2>/dev/null)" = 404 ]; }
if grep -q "another process holds port .*; every port is moved by" <<<"$up_out" && [ "$other_hooks" != "$HOOKS_URL" ] &&
  answers "$other/.stack/tls/ca.pem" "$other_hooks" && answers "$TLS_CA_FILE" "$HOOKS_URL"; then
  echo "ok: a second stack whose default ports are held moves them ($HOOKS_URL -> $other_hooks) and both answer"
  passed=$((passed + 1))
else
  echo "FAIL: a second stack did not move its ports away from this one's (its hooks: $other_hooks, ours: $HOOKS_URL)"
  echo "$up_out" | tail -5
  failed=$((failed + 1))
fi
"$other/scripts/stack" down >/dev/null 2>&1
rm -rf "$other"

echo "stack-faults: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
