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
echo "stack-faults: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
