// The pipeline page's Snapshot card: one accessible progress bar per table, refreshed by the
// page's own 5 s poll while Debezium's initial snapshot runs, and still shown once it is done.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { renameSync, writeFileSync } from 'node:fs';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api, htmxReady, psql, dropCaptureFixture, pointProviderAt, releaseProvider } from './harness.mjs';

const env = process.env;
const schema = `bs_${process.pid}`;
const prefix = `bs-${process.pid}`;
const slot = `bs_${process.pid}`;
const rows = 200000;
let app, browser, token;

before(async () => {
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h', CLUECDC_MONITOR_INTERVAL: '1s' } });
  createUser(app, 'ada', 'admin');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
  psql(env.PG_SOURCE_DB, `CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.big (id int PRIMARY KEY, note text NOT NULL); CREATE TABLE ${schema}.small (id int PRIMARY KEY, name text); INSERT INTO ${schema}.big SELECT g, 'row ' || g FROM generate_series(1, ${rows}) g; INSERT INTO ${schema}.small VALUES (1, 'Ada'), (2, 'Grace'); ANALYZE ${schema}.big; ANALYZE ${schema}.small;`);
});
after(async () => {
  await browser?.close();
  await app?.stop();
  await fetch(`${env.CONNECT_URL}/connectors/cluecdc-capture-${prefix}`, { method: 'DELETE' }).catch(() => {});
  await dropCaptureFixture(slot, schema);
  releaseProvider();
});

test('the pipeline page shows a progress bar per table while the snapshot runs, and the finished snapshot after', async () => {
  const [, connect] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: env.CONNECT_URL });
  await pointProviderAt(app, connect);
  const [, kafka] = await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'stack kafka', bootstrap_servers: env.KAFKA_BOOTSTRAP });
  const [s1, src] = await api(app, token, 'POST', '/api/v1/connections', {
    name: 'shop db', provider: 'POSTGRESQL', capabilities: ['SOURCE'],
    settings: { host: env.PG_HOST, port: Number(env.PG_PORT), database: env.PG_SOURCE_DB, user: env.PG_USER, tls_mode: 'disable', slot_name: slot, publication_name: slot },
    secrets: { password: env.PG_PASSWORD },
  });
  assert.equal(s1, 201, JSON.stringify(src));
  const [s2, p] = await api(app, token, 'POST', '/api/v1/pipelines', {
    name: 'shop snapshot', source_connection_id: src.id, kafka_cluster_id: kafka.id, connect_cluster_id: connect.id,
    tables: [`${schema}.big`, `${schema}.small`], topic_prefix: prefix, partitions: 1, replication_factor: 1,
    options: { 'max.batch.size': '1024' },
  });
  assert.equal(s2, 201, JSON.stringify(p));

  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.goto(`${app.url}/pipelines/${p.id}`);
  await htmxReady(page);
  const card = page.locator('section.snapshot');
  // The card appears by itself (the status block polls every 5 s): no reload.
  await card.waitFor({ timeout: 120_000 });
  const bigBar = card.getByRole('progressbar', { name: new RegExp(`${schema}\\.big`) });
  const smallBar = card.getByRole('progressbar', { name: new RegExp(`${schema}\\.small`) });
  await bigBar.waitFor();
  await smallBar.waitFor();
  // While it scans: a determinate bar with the row estimate in its accessible name.
  let seenScanning = false;
  for (let i = 0; i < 60 && !seenScanning; i++) {
    const text = await card.innerText().catch(() => '');
    if (/▶ scanning/.test(text) && /of ~200,000 rows \(est\.\)/.test(text)) {
      seenScanning = true;
      const now = Number(await bigBar.getAttribute('value'));
      assert.ok(now > 0 && now < rows, `the bar moves: ${now}`);
      assert.equal(await bigBar.getAttribute('max'), String(rows));
      await screenshot(page, 'snapshot-progress-running');
      const narrow = await browser.newPage({ viewport: { width: 390, height: 844 } });
      await signIn(narrow, app, 'ada');
      await narrow.goto(`${app.url}/pipelines/${p.id}`);
      await narrow.locator('section.snapshot').waitFor();
      await screenshot(narrow, 'snapshot-progress-running-390');
      await narrow.close();
    } else {
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  assert.ok(seenScanning, 'the page showed the big table scanning with its estimate');
  // Done: every bar full, the count of tables, the finish time; the page updated itself.
  await card.getByText('2 of 2', { exact: false }).waitFor({ timeout: 180_000 });
  await card.getByText('✓ completed').waitFor({ timeout: 30_000 });
  const text = await card.innerText();
  assert.match(text, /200,000 of ~200,000 rows \(est\.\) · 100 %/);
  assert.match(text, /finished/);
  assert.equal(await bigBar.getAttribute('value'), await bigBar.getAttribute('max'));
  assert.match(await bigBar.getAttribute('aria-label'), /200,000 of ~200,000 rows/);
  await screenshot(page, 'snapshot-progress-done');
  const narrow = await browser.newPage({ viewport: { width: 390, height: 844 } });
  await signIn(narrow, app, 'ada');
  await narrow.goto(`${app.url}/pipelines/${p.id}`);
  await narrow.locator('section.snapshot').waitFor();
  const overflow = await narrow.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  assert.equal(overflow, false, 'no horizontal scroll at 390 px');
  await screenshot(narrow, 'snapshot-progress-done-390');
  await narrow.close();
  assert.deepEqual(errors, []);
  await api(app, token, 'DELETE', `/api/v1/pipelines/${p.id}`);
});
