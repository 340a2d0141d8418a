import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { renameSync, writeFileSync } from 'node:fs';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api, htmxReady, pointProviderAt, releaseProvider } from './harness.mjs';

const env = process.env;
const schema = `bw_${process.pid}`;
const prefix = `bw-${process.pid}`;
let app, browser, token;

function psql(sql) {
  const out = spawnSync('psql', ['-h', env.PG_HOST, '-p', env.PG_PORT, '-U', env.PG_USER, '-d', env.PG_SOURCE_DB, '-tA', '-v', 'ON_ERROR_STOP=1', '-c', sql], { env: { ...env, PGPASSWORD: env.PG_PASSWORD }, encoding: 'utf8' });
  if (out.status !== 0) throw new Error(out.stderr);
  return out.stdout.trim();
}

before(async () => {
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h', CLUECDC_MONITOR_INTERVAL: '1s' } });
  createUser(app, 'ada', 'admin');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
  psql(`CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.orders (id int PRIMARY KEY, total numeric); CREATE TABLE ${schema}.notes (body text); CREATE TABLE ${schema}.customers (id int PRIMARY KEY, name text); INSERT INTO ${schema}.orders VALUES (1, 9.5); INSERT INTO ${schema}.customers VALUES (1, 'Ada'), (2, 'Grace');`);
});
after(async () => {
  await browser?.close();
  await app?.stop();
  await fetch(`${env.CONNECT_URL}/connectors/cluecdc-capture-${prefix}`, { method: 'DELETE' }).catch(() => {});
  // The slot can be dropped once the deleted connector's task has let go of it; a slot left
  // behind would keep WAL on the shared fixture server for good.
  for (let i = 0; i < 60; i++) {
    try {
      psql(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'bw_${process.pid}' AND NOT active`);
      if (psql(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'bw_${process.pid}'`) === '0') break;
    } catch { /* retried */ }
    await new Promise((r) => setTimeout(r, 500));
  }
  psql(`DROP PUBLICATION IF EXISTS bw_${process.pid}; DROP SCHEMA IF EXISTS ${schema} CASCADE;`);
  releaseProvider();
});

test('an operator creates a pipeline through the wizard: tables from discovery, review with the plugin verdict, then create', async () => {
  // Clusters and the source connection come from the API (their pages are covered elsewhere).
  const [, connect] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: env.CONNECT_URL });
  await pointProviderAt(app, connect);
  await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'stack kafka', bootstrap_servers: env.KAFKA_BOOTSTRAP });
  const [s1, src] = await api(app, token, 'POST', '/api/v1/connections', {
    name: 'shop db', provider: 'POSTGRESQL', capabilities: ['SOURCE'],
    settings: { host: env.PG_HOST, port: Number(env.PG_PORT), database: env.PG_SOURCE_DB, user: env.PG_USER, tls_mode: 'disable', slot_name: `bw_${process.pid}`, publication_name: `bw_${process.pid}` },
    secrets: { password: env.PG_PASSWORD },
  });
  assert.equal(s1, 201, JSON.stringify(src));

  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.getByRole('link', { name: 'Pipelines' }).click();
  await page.getByRole('link', { name: 'Create pipeline' }).click();
  await page.waitForURL(/\/pipelines\/new/);
  await htmxReady(page);
  await page.getByLabel('1. Source connection').selectOption(src.id);
  await page.getByLabel(`${schema}.orders`).check();
  assert.match(await page.locator(`tr:has-text("${schema}.notes")`).innerText(), /no key/, 'a keyless table is flagged');
  await page.getByLabel('Pipeline name').fill('shop orders');
  await page.getByLabel('Topic prefix').fill(prefix);
  await page.getByRole('button', { name: '4. Review' }).click();
  await page.getByText('plugin accepts this config').waitFor({ timeout: 30_000 });
  const review = await page.locator('main').innerText();
  assert.match(review, new RegExp(`${prefix}\\.${schema}\\.orders`), 'the topics to create are listed');
  assert.match(review, /\$\{cluecdc:sec_[0-9a-f]+:password\}/, 'the password appears only as a reference');
  assert.ok(!review.includes(env.PG_PASSWORD));
  await screenshot(page, 'pipeline-review');
  await page.getByRole('button', { name: '5. Create pipeline' }).click();
  await page.waitForURL(/\/pipelines\/pl_/);
  // The status section refreshes itself: no reload.
  await page.locator('#pipeline-status .state-running').first().waitFor({ timeout: 90_000 });
  await page.locator('#pipeline-status .state-running:has-text("active")').waitFor({ timeout: 60_000 });
  await screenshot(page, 'pipeline-detail');
  // The overview shows the pipeline with its retained-WAL chart once a few samples exist.
  await new Promise((r) => setTimeout(r, 4000));
  await page.getByRole('link', { name: 'Overview' }).click();
  const row = page.locator('tr:has-text("shop orders")');
  assert.match(await row.innerText(), /RUNNING/);
  assert.match(await row.innerText(), /retained WAL/);
  assert.match(await row.innerText(), /newest record \d+ s ago/, 'the snapshot record reached Kafka and its age is shown');
  assert.equal(await row.locator('svg.spark polyline').count(), 1, 'a server-rendered sparkline');
  await screenshot(page, 'overview');
  await page.goBack();
  await page.reload();
  assert.match(await page.locator('#topics-heading + p').innerText(), /^Newest record \d+ s ago · 1 records written in all\.$/);
  assert.match(await page.locator('main').innerText(), /Confirmed flush lag\s+\d+ bytes/);
  await screenshot(page, 'pipeline-topics');

  // Change the tables on the page: none is refused inline; adding one is applied at once.
  await page.getByRole('link', { name: 'Change tables…' }).click();
  await page.locator(`[id="t-${schema}-orders"]`).uncheck();
  await page.getByRole('button', { name: 'Save tables' }).click();
  await page.locator('#tables-error').waitFor();
  assert.match(await page.locator('#tables-error').innerText(), /at least one table/i);
  assert.equal(await page.locator(`[id="t-${schema}-orders"]`).isChecked(), false, 'what was ticked stays');
  await page.locator(`[id="t-${schema}-orders"]`).check();
  await page.locator(`[id="t-${schema}-customers"]`).check();
  await screenshot(page, 'pipeline-tables');
  await page.getByRole('button', { name: 'Save tables' }).click();
  await page.waitForURL(/\/pipelines\/pl_[0-9a-f]+$/);
  const changed = await page.locator('main').innerText();
  assert.match(changed, new RegExp(`Tables of shop orders changed: now ${schema}\\.customers, ${schema}\\.orders\\.`));
  assert.match(changed, new RegExp(`${schema}\\.customers will be snapshotted`));
  assert.match(await page.locator('#topics-heading').locator('..').innerText(), new RegExp(`${prefix}\\.${schema}\\.customers`), 'its topic exists');
  await page.getByRole('link', { name: 'Delete pipeline…' }).click();
  assert.match(await page.locator('main').innerText(), /the source's disk fills/);
  assert.doesNotMatch(await page.locator('main').innerText(), /Pipeline shop orders created/, 'a flash message shows once');
  await page.getByLabel(/Also drop the replication slot/).check();
  await screenshot(page, 'pipeline-delete-confirm');
  await page.getByRole('button', { name: 'Delete shop orders' }).click();
  await page.waitForURL(app.url + '/pipelines');
  assert.match(await page.locator('main').innerText(), /replication slot dropped/);
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});
