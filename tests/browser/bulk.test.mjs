// Bulk actions from the deliveries list: 50 deliveries paused in one action (every row on the
// page selected) and resumed in one action (all that match the filter), each a confirmation
// page that lists what will happen per delivery, then a progress page that refreshes itself;
// one delivery held by an offset operation is refused beside it while the others go on; each
// bulk is one change set in the audit trail.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api, psql, dropCaptureFixture, htmxReady, pointProviderAt, releaseProvider, takeProviderLock } from './harness.mjs';

const env = process.env;
const pid = process.pid;
const schema = `bbk_${pid}`;
const slot = `bbk_${pid}`;
const prefix = `bbk-${pid}`;
const objectPrefix = `bbk-${pid}-${Date.now().toString(36)}/`;
const N = 50;
const tag = `bk${pid}`;
const names = Array.from({ length: N }, (_, i) => `${tag} ${String(i).padStart(2, '0')}`);
const connectorOf = (name) => `cluecdc-deliver-${name.toLowerCase().replace(/[^a-z0-9]/g, '-')}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let app, browser, token, pipeline;
const deliveries = [];
const timings = {};

/** Connect's own state of each of our connectors: name → state. */
async function connectStates() {
  const res = await fetch(`${env.CONNECT_URL}/connectors?expand=status`);
  const all = await res.json();
  const out = {};
  for (const n of names) out[n] = all[connectorOf(n)]?.status?.connector?.state;
  return out;
}

async function until(what, within, f) {
  const deadline = Date.now() + within;
  let last;
  while (Date.now() < deadline) {
    last = await f();
    if (last === true) return;
    await sleep(500);
  }
  throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`);
}

/** Waits until Connect shows every connector in `want(name)`. */
async function connectShows(want, within) {
  await until('Connect to show every delivery as wanted', within, async () => {
    const st = await connectStates();
    const off = names.filter((n) => st[n] !== want(n));
    return off.length === 0 ? true : off.map((n) => `${n}: ${st[n]}`).slice(0, 5);
  });
}

before(async () => {
  const t0 = Date.now();
  await takeProviderLock();
  timings.lock_wait = (Date.now() - t0) / 1000;
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h', CLUECDC_MONITOR_INTERVAL: '5s', CLUECDC_OFFSETS_INTERVAL: '5s' } });
  createUser(app, 'ada', 'admin');
  createUser(app, 'otto', 'operator');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
  psql(env.PG_SOURCE_DB, `CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.items (id int PRIMARY KEY, name text); INSERT INTO ${schema}.items VALUES (1, 'apple');`);
  const [, connect] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: env.CONNECT_URL });
  await pointProviderAt(app, connect);
  const [, kafka] = await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'stack kafka', bootstrap_servers: env.KAFKA_BOOTSTRAP });
  const [s1, src] = await api(app, token, 'POST', '/api/v1/connections', {
    name: 'shop db', provider: 'POSTGRESQL', capabilities: ['SOURCE'],
    settings: { host: env.PG_HOST, port: Number(env.PG_PORT), database: env.PG_SOURCE_DB, user: env.PG_USER, tls_mode: 'disable', slot_name: slot, publication_name: slot },
    secrets: { password: env.PG_PASSWORD },
  });
  assert.equal(s1, 201, JSON.stringify(src));
  const [s2, lake] = await api(app, token, 'POST', '/api/v1/connections', {
    name: 'lake', provider: 'MINIO', capabilities: ['DESTINATION'],
    settings: { bucket: env.S3_BUCKET, region: env.S3_REGION, endpoint: env.S3_ENDPOINT, prefix: objectPrefix, path_style: true, use_ssl: false },
    secrets: { access_key_id: env.S3_ACCESS_KEY, secret_access_key: env.S3_SECRET_KEY },
  });
  assert.equal(s2, 201, JSON.stringify(lake));
  const [s3, p] = await api(app, token, 'POST', '/api/v1/pipelines', {
    name: 'shop', source_connection_id: src.id, kafka_cluster_id: kafka.id, connect_cluster_id: connect.id,
    tables: [`${schema}.items`], topic_prefix: prefix,
  });
  assert.equal(s3, 201, JSON.stringify(p));
  pipeline = p;
  // The cheapest real deliveries: object storage, one task each, one small topic.
  for (const name of names) {
    const [s, d] = await api(app, token, 'POST', '/api/v1/deliveries', { name, pipeline_id: p.id, destination_connection_id: lake.id });
    assert.equal(s, 201, JSON.stringify(d));
    deliveries.push(d);
  }
  timings.created = (Date.now() - t0) / 1000;
  await connectShows(() => 'RUNNING', 300_000);
  timings.running = (Date.now() - t0) / 1000;
});

after(async () => {
  const t0 = Date.now();
  if (app && deliveries.length) {
    const [s, b] = await api(app, token, 'POST', '/api/v1/bulk', { action: 'delete', targets: deliveries.map((d) => ({ kind: 'delivery', id: d.id })) });
    if (s === 202) {
      await until('the bulk delete', 300_000, async () => {
        const [, now] = await api(app, token, 'GET', `/api/v1/bulk/${b.id}`);
        return now.items.every((i) => i.state !== 'pending' && i.state !== 'running') || now.counts;
      }).catch((e) => console.error(e.message));
    }
    await api(app, token, 'DELETE', `/api/v1/pipelines/${pipeline.id}?drop_slot=true`).catch(() => {});
  }
  timings.cleanup = (Date.now() - t0) / 1000;
  await browser?.close();
  await app?.stop();
  for (const name of [`cluecdc-capture-${prefix}`, ...names.map(connectorOf)]) {
    await fetch(`${env.CONNECT_URL}/connectors/${name}`, { method: 'DELETE' }).catch(() => {});
  }
  releaseProvider();
  await dropCaptureFixture(slot, schema);
  if (env.S3_DATA_DIR) rmSync(join(env.S3_DATA_DIR, env.S3_BUCKET, objectPrefix.replace(/\/$/, '')), { recursive: true, force: true });
  console.log(`bulk browser test timings (s): ${JSON.stringify(timings)}`);
});

/** Waits until the progress page says every item has finished; the items' rows. */
async function progressFinished(page) {
  await page.getByRole('heading', { name: /^Finished:/ }).waitFor({ timeout: 120_000 });
  return page.locator('#bulk-progress tbody tr');
}

test('50 deliveries are paused and resumed from the list in one action each, one held by an operation refused beside the others, each bulk one change set', async () => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'otto');

  // Pause: every row on the page selected (a server round trip, no script).
  const t0 = Date.now();
  await page.goto(`${app.url}/deliveries?q=${encodeURIComponent(tag)}`);
  assert.equal(await page.getByRole('checkbox', { name: /^Select delivery / }).count(), N);
  await page.getByRole('link', { name: 'Select all on this page' }).click();
  await page.waitForURL(/select=page/);
  const boxes = page.getByRole('checkbox', { name: /^Select delivery / });
  assert.equal(await boxes.count(), N);
  for (let i = 0; i < N; i++) assert.ok(await boxes.nth(i).isChecked(), `row ${i} is checked`);
  await screenshot(page, 'bulk-list-selected');
  await page.getByRole('button', { name: 'Pause…' }).click();
  await page.getByRole('heading', { name: `Confirm: pause ${N} deliveries` }).waitFor();
  assert.equal(await page.locator('tbody tr').count(), N, 'the confirmation lists every delivery');
  assert.match(await page.locator('tbody').innerText(), /pause: Connect pauses its connector/);
  await screenshot(page, 'bulk-confirm-pause');

  // Delivery 00 is taken by an offset change right before the confirmation is sent.
  const held = deliveries[0];
  const [rs, replay] = await api(app, token, 'POST', `/api/v1/deliveries/${held.id}/replay`, { from: 'earliest', confirm: held.name });
  assert.equal(rs, 202, JSON.stringify(replay));
  await page.getByRole('button', { name: `Yes, pause ${N} deliveries` }).click();
  await page.waitForURL(/\/bulk\/[0-9a-f-]+$/);
  await htmxReady(page);
  const rows = await progressFinished(page);
  timings.pause_items = (Date.now() - t0) / 1000;
  assert.equal(await rows.count(), N);
  const heldRow = page.locator('#bulk-progress tbody tr', { hasText: held.name });
  assert.equal(await heldRow.getAttribute('data-state'), 'refused');
  assert.match(await heldRow.innerText(), new RegExp(`refused[\\s\\S]*operation ${replay.operation_id} \\(replay\\) holds its connector`));
  assert.equal(await page.locator('#bulk-progress tbody tr[data-state="done"]').count(), N - 1, 'the others are done');
  assert.match(await page.getByRole('heading', { name: /^Finished:/ }).innerText(), new RegExp(`${N - 1} done, 1 refused`));
  await screenshot(page, 'bulk-progress-pause');
  await until('Connect to show every delivery but the held one PAUSED', 120_000, async () => {
    const st = await connectStates();
    const off = names.filter((n) => n !== held.name && st[n] !== 'PAUSED');
    return off.length === 0 ? true : off.slice(0, 5).map((n) => `${n}: ${st[n]}`);
  });
  timings.pause_connect = (Date.now() - t0) / 1000;

  // One change set: the audit page's request filter shows the bulk row and each item's row.
  await page.getByRole('link', { name: 'its rows in the audit trail' }).click();
  await page.waitForURL(/\/audit\?request=/);
  const changeSet = new URL(page.url()).searchParams.get('request');
  const [, audit] = await api(app, token, 'GET', `/api/v1/audit?request=${encodeURIComponent(changeSet)}&limit=500`);
  assert.equal(audit.items.filter((r) => r.action === 'bulk.pause').length, 1, JSON.stringify(audit.items.map((r) => r.action)));
  assert.equal(audit.items.filter((r) => r.action === 'connector.pause').length, N - 1);
  assert.equal(audit.items.find((r) => r.action === 'bulk.pause').summary.items.length, N);
  assert.match(await page.locator('main').innerText(), /bulk\.pause/);

  // The replay gives delivery 00 back running. Resume: all that match the filter; the
  // confirmation says 00 is refused as already running, and why.
  await until('the replay to end', 120_000, async () => {
    const [, op] = await api(app, token, 'GET', `/api/v1/operations/${replay.operation_id}`);
    return op.state !== 'running' || op.step;
  });
  const [, replayed] = await api(app, token, 'GET', `/api/v1/operations/${replay.operation_id}`);
  assert.equal(replayed.state, 'done', JSON.stringify(replayed));
  const t1 = Date.now();
  await page.goto(`${app.url}/deliveries?q=${encodeURIComponent(tag)}`);
  await page.getByRole('radio', { name: `All ${N} deliveries that match this filter` }).check();
  await page.getByRole('button', { name: 'Resume…' }).click();
  await page.getByRole('heading', { name: `Confirm: resume ${N} deliveries` }).waitFor();
  const refusedRow = page.locator('tbody tr', { hasText: held.name });
  assert.match(await refusedRow.innerText(), /refused:\s*already running/);
  await screenshot(page, 'bulk-confirm-resume');
  await page.getByRole('button', { name: `Yes, resume ${N - 1} deliveries` }).click();
  await page.waitForURL(/\/bulk\/[0-9a-f-]+$/);
  await htmxReady(page);
  await progressFinished(page);
  timings.resume_items = (Date.now() - t1) / 1000;
  assert.equal(await page.locator('#bulk-progress tbody tr[data-state="done"]').count(), N - 1);
  assert.equal(await page.locator('#bulk-progress tbody tr[data-state="refused"]').count(), 1);
  await connectShows(() => 'RUNNING', 120_000);
  timings.resume_connect = (Date.now() - t1) / 1000;
  await screenshot(page, 'bulk-progress-resume');
  assert.deepEqual(errors, [], 'no console errors (CSP)');
  await ctx.close();
});

test('a viewer sees no bulk controls on the lists', async () => {
  createUser(app, 'vera', 'viewer');
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await signIn(page, app, 'vera');
  for (const path of ['/deliveries', '/pipelines', '/replications', '/connectors?select=page']) {
    await page.goto(app.url + path);
    assert.equal(await page.getByRole('checkbox').count(), 0, path);
    assert.equal(await page.getByRole('button', { name: 'Pause…' }).count(), 0, path);
  }
  await ctx.close();
});
