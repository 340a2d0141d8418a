#!/usr/bin/env bash
# The shop trickle: calls shop_tick() (compose/postgres/20-shop.sql) in the example `shop`
# database every INTERVAL seconds, so that a first capture shows rows moving: an order inserted
# each time, now and then a customer or a price updated, rarely an order deleted (the function
# keeps the database bounded).
#
# Usage: shop-trickle.sh PSQL STATE_DIR [INTERVAL]
#   PSQL       the psql client to run; the connection comes from PGHOST, PGPORT, PGUSER,
#              PGPASSWORD and PGDATABASE
#   STATE_DIR  where `last-tick` (what the last successful tick did; its time says the trickle
#              is alive) is written
# Run by `scripts/stack` (component shop) and by compose.yaml (service shop-trickle). One psql per
# tick: a server that goes away and comes back costs failed ticks, nothing else. Failures are
# logged when they start and stop, and every 5 minutes while they go on; successes every 5 minutes.
set -uo pipefail
psql="${1:?usage: shop-trickle.sh PSQL STATE_DIR [INTERVAL]}"
state="${2:?usage: shop-trickle.sh PSQL STATE_DIR [INTERVAL]}"
interval="${3:-2}"
mkdir -p "$state"
ok=0 failed=0 failing=0 last_report=$SECONDS sleeper=
stamp() { date -u +%FT%TZ; }
trap '[[ -n "$sleeper" ]] && kill "$sleeper" 2>/dev/null; echo "$(stamp) shop-trickle: stopping after $ok ticks ($failed failed)"; exit 0' TERM INT
echo "$(stamp) shop-trickle: calling shop_tick() in ${PGDATABASE:-?} on ${PGHOST:-?}:${PGPORT:-?} as ${PGUSER:-?} every ${interval}s"
while :; do
  if out="$("$psql" -X -q -t -A -v ON_ERROR_STOP=1 -c 'SELECT shop_tick()' 2>&1)"; then
    ok=$((ok + 1))
    printf '%s %s\n' "$(stamp)" "$out" >"$state/last-tick.tmp" && mv -f "$state/last-tick.tmp" "$state/last-tick"
    if ((failing)); then echo "$(stamp) shop-trickle: ticking again ($out)"; failing=0; fi
  else
    failed=$((failed + 1))
    if ((!failing)); then echo "$(stamp) shop-trickle: tick failed: ${out//$'\n'/ }"; failing=1; last_report=$SECONDS; fi
  fi
  if ((SECONDS - last_report >= 300)); then
    if ((failing)); then echo "$(stamp) shop-trickle: still failing ($failed failed so far): ${out//$'\n'/ }"
    else echo "$(stamp) shop-trickle: $ok ticks ($failed failed), last: $out"; fi
    last_report=$SECONDS
  fi
  # `wait` on a background sleep, so that TERM is handled at once rather than after the sleep.
  sleep "$interval" &
  sleeper=$!
  wait "$sleeper" 2>/dev/null
done
