import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { screenshotDir, startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api, htmxReady, psql, dropCaptureFixture, pointProviderAt, releaseProvider } from './harness.mjs';

// Per-table freshness on the pages: a pipeline over two tables with writes continuing, one
// removed from the publication by hand (stalled) and one fresh, listed stalest first; a paused
// delivery's lag per table.
const env = process.env;
const tag = `bf_${process.pid}`;
const schema = tag;
const prefix = `bf-${process.pid}`;
const source = (sql) => psql(env.PG_SOURCE_DB, sql);
let app, browser, token, writing = true, writer;

/** One psql per insert (a backend that never goes idle never flushes its table statistics). */
function insertAsync(sql) {
  return new Promise((ok) => {
    const child = spawn('psql', ['-h', env.PG_HOST, '-p', env.PG_PORT, '-U', env.PG_USER, '-d', env.PG_SOURCE_DB, '-qtA', '-c', sql], { env: { ...env, PGPASSWORD: env.PG_PASSWORD }, stdio: 'ignore' });
    child.on('exit', ok);
  });
}

async function eventually(what, within, f) {
  const deadline = Date.now() + within;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

before(async () => {
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h', CLUECDC_MONITOR_INTERVAL: '1s', CLUECDC_OFFSETS_INTERVAL: '1s' } });
  createUser(app, 'ada', 'admin');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
  source(`CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.orders (id serial PRIMARY KEY, v int); CREATE TABLE ${schema}.items (id serial PRIMARY KEY, v int); INSERT INTO ${schema}.orders (v) VALUES (1); INSERT INTO ${schema}.items (v) VALUES (1);`);
});
after(async () => {
  writing = false;
  await writer;
  await browser?.close();
  await app?.stop();
  for (const name of [`cluecdc-capture-${prefix}`, 'cluecdc-deliver-bf-copy']) {
    await fetch(`${env.CONNECT_URL}/connectors/${name}`, { method: 'DELETE' }).catch(() => {});
  }
  await dropCaptureFixture(tag, schema);
  try { psql(env.PG_DEST_DB, `DROP TABLE IF EXISTS ${tag}_orders, ${tag}_items`); } catch { /* none */ }
  releaseProvider();
});

test('the pipeline page lists a stalled and a fresh table stalest first, the delivery page its lag per table', async () => {
  const [, connect] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: env.CONNECT_URL });
  await pointProviderAt(app, connect);
  const [, kafka] = await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'stack kafka', bootstrap_servers: env.KAFKA_BOOTSTRAP });
  const [s1, src] = await api(app, token, 'POST', '/api/v1/connections', {
    name: 'shop db', provider: 'POSTGRESQL', capabilities: ['SOURCE'],
    settings: { host: env.PG_HOST, port: Number(env.PG_PORT), database: env.PG_SOURCE_DB, user: env.PG_USER, tls_mode: 'disable', slot_name: tag, publication_name: tag },
    secrets: { password: env.PG_PASSWORD },
  });
  assert.equal(s1, 201, JSON.stringify(src));
  const [, dest] = await api(app, token, 'POST', '/api/v1/connections', {
    name: 'warehouse', provider: 'POSTGRESQL', capabilities: ['DESTINATION'],
    settings: { host: env.PG_HOST, port: Number(env.PG_PORT), database: env.PG_DEST_DB, user: env.PG_USER, tls_mode: 'disable' },
    secrets: { password: env.PG_PASSWORD },
  });
  const [s2, p] = await api(app, token, 'POST', '/api/v1/pipelines', { name: 'shop', source_connection_id: src.id, kafka_cluster_id: kafka.id, connect_cluster_id: connect.id, tables: [`${schema}.orders`, `${schema}.items`], topic_prefix: prefix });
  assert.equal(s2, 201, JSON.stringify(p));
  const [s3, d] = await api(app, token, 'POST', '/api/v1/deliveries', { name: 'bf copy', pipeline_id: p.id, destination_connection_id: dest.id, table_name_format: `${tag}_\${source.table}` });
  assert.equal(s3, 201, JSON.stringify(d));
  await api(app, token, 'POST', `/api/v1/deliveries/${d.id}/pause`, {});
  const [s4] = await api(app, token, 'PATCH', '/api/v1/alert-rules/table_stalled', { threshold: 8 });
  assert.equal(s4, 200);
  writer = (async () => {
    while (writing) {
      await insertAsync(`INSERT INTO ${schema}.orders (v) VALUES (2); INSERT INTO ${schema}.items (v) VALUES (2);`);
      await new Promise((r) => setTimeout(r, 300));
    }
  })();
  const tableOf = async (name) => {
    const [, detail] = await api(app, token, 'GET', `/api/v1/pipelines/${p.id}`);
    return detail.tables?.find((t) => t.name === `${schema}.${name}`);
  };
  await eventually('both tables fresh', 150_000, async () => (await tableOf('orders'))?.state === 'fresh' && (await tableOf('items'))?.state === 'fresh');
  // orders leaves the publication by hand (its owner, the connector user, may): it stalls.
  source(`ALTER PUBLICATION ${tag} DROP TABLE ${schema}.orders`);
  await eventually('orders stalled', 60_000, async () => (await tableOf('orders'))?.state === 'stalled');

  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.goto(`${app.url}/pipelines/${p.id}`);
  await htmxReady(page);
  const card = page.locator('section:has(#topics-heading)');
  // As captured first; the header link sorts stalest first, server-side.
  assert.deepEqual(await card.locator('tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.table)), [`${schema}.orders`, `${schema}.items`]);
  await card.getByRole('link', { name: 'State' }).click();
  await page.waitForURL(/sort=stale/);
  await htmxReady(page);
  const order = () => card.locator('tbody tr').evaluateAll((rows) => rows.map((r) => [r.dataset.table, r.dataset.state]));
  assert.deepEqual(await order(), [[`${schema}.orders`, 'stalled'], [`${schema}.items`, 'fresh']]);
  const text = await card.innerText();
  assert.match(text, /✕ stalled \d+ s/);
  assert.match(text, /● fresh/);
  assert.match(text, new RegExp(`${schema}\\.orders: Likely causes, most certain first: 1\\. found: not in publication ${tag}: ALTER PUBLICATION`));
  assert.match(text, /\d+ s ago/, 'last change as an age');
  assert.ok(await card.locator('tbody tr:first-child time[title]').count() >= 1, 'the absolute time on hover');
  // The page polls every 5 s and keeps the chosen order.
  assert.match(await page.locator('#pipeline-status').getAttribute('hx-get'), /\?sort=stale$/);
  await page.waitForResponse((r) => r.url().includes(`/pipelines/${p.id}?sort=stale`) && r.request().headers()['hx-request'] === 'true', { timeout: 15_000 });
  await htmxReady(page);
  assert.equal((await order())[0][0], `${schema}.orders`);
  await card.scrollIntoViewIfNeeded();
  await screenshot(page, 'pipeline-tables-stale');
  await page.setViewportSize({ width: 390, height: 844 });
  await screenshot(page, 'pipeline-tables-stale-390');
  await card.screenshot({ path: join(screenshotDir, 'pipeline-tables-card-390.png') });

  // The paused delivery: lag per table, in records and in time, most behind first on request.
  await page.setViewportSize({ width: 1280, height: 900 });
  await eventually('lag per table in time', 60_000, async () => {
    const [, detail] = await api(app, token, 'GET', `/api/v1/deliveries/${d.id}`);
    return detail.tables?.length === 2 && detail.tables.every((t) => t.lag_records > 0 && t.lag_secs > 0);
  });
  await page.goto(`${app.url}/deliveries/${d.id}?sort=stale`);
  await htmxReady(page);
  const lag = page.locator('section:has(#dtables-heading)');
  const lagText = await lag.innerText();
  assert.match(lagText, /\d+ records/);
  assert.match(lagText, /at least \d+ (s|min)/);
  assert.match(await page.locator('#delivery-status').getAttribute('hx-get'), /\?sort=stale$/);
  await lag.scrollIntoViewIfNeeded();
  await screenshot(page, 'delivery-tables');
  await page.setViewportSize({ width: 390, height: 844 });
  await screenshot(page, 'delivery-tables-390');
  await lag.screenshot({ path: join(screenshotDir, 'delivery-tables-card-390.png') });

  // Put back: the stall resolves.
  source(`ALTER PUBLICATION ${tag} ADD TABLE ${schema}.orders`);
  await eventually('orders fresh again', 60_000, async () => (await tableOf('orders'))?.state === 'fresh');
  assert.deepEqual(errors, []);
});
