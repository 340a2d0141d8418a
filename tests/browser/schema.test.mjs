// Schema-change guardrails on the pages: the pipeline page's timeline of versions, the newest
// change and the verdict per delivery; the delivery page's policy and verdicts; the policy on the
// edit form. Real DDL on the stack's PostgreSQL, a real JDBC sink into the destination database.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { renameSync, writeFileSync } from 'node:fs';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api, psql, dropCaptureFixture, htmxReady, pointProviderAt, releaseProvider } from './harness.mjs';

const env = process.env;
const pid = process.pid;
const schema = `bws_${pid}`;
const prefix = `bws-${pid}`;
const slot = `bws_${pid}`;
const destTable = `bws_${pid}_items`;
const deliveryName = `bws${pid} replica`;
const connectorOf = (name) => `cluecdc-deliver-${name.toLowerCase().replace(/[^a-z0-9]/g, '-')}`;
let app, browser, token, pipeline, delivery;

const source = (sql) => psql(env.PG_SOURCE_DB, sql);
const dest = (sql) => psql(env.PG_DEST_DB, sql);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, f, ms = 90_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(500);
  }
}

before(async () => {
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h', CLUECDC_MONITOR_INTERVAL: '1s', CLUECDC_LOG: 'info,cluecdc::tables::schema=debug' } });
  createUser(app, 'ada', 'admin');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
  source(`CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.items (id int PRIMARY KEY, code varchar(20) NOT NULL, price numeric(10,2)); CREATE TABLE ${schema}.notes (id int PRIMARY KEY, body text); INSERT INTO ${schema}.items VALUES (1, 'apple', 1.50);`);
  const [, connect] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: env.CONNECT_URL });
  await pointProviderAt(app, connect);
  const [, kafka] = await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'stack kafka', bootstrap_servers: env.KAFKA_BOOTSTRAP });
  const [s1, src] = await api(app, token, 'POST', '/api/v1/connections', {
    name: 'shop db', provider: 'POSTGRESQL', capabilities: ['SOURCE'],
    settings: { host: env.PG_HOST, port: Number(env.PG_PORT), database: env.PG_SOURCE_DB, user: env.PG_USER, tls_mode: 'disable', slot_name: slot, publication_name: slot },
    secrets: { password: env.PG_PASSWORD },
  });
  assert.equal(s1, 201, JSON.stringify(src));
  const [s2, pg] = await api(app, token, 'POST', '/api/v1/connections', {
    name: 'replica db', provider: 'POSTGRESQL', capabilities: ['DESTINATION'],
    settings: { host: env.PG_HOST, port: Number(env.PG_PORT), database: env.PG_DEST_DB, user: env.PG_USER, tls_mode: 'disable' },
    secrets: { password: env.PG_PASSWORD },
  });
  assert.equal(s2, 201, JSON.stringify(pg));
  const [s3, p] = await api(app, token, 'POST', '/api/v1/pipelines', {
    name: 'shop', source_connection_id: src.id, kafka_cluster_id: kafka.id, connect_cluster_id: connect.id,
    tables: [`${schema}.items`, `${schema}.notes`], topic_prefix: prefix,
  });
  assert.equal(s3, 201, JSON.stringify(p));
  pipeline = p;
  const [s4, d] = await api(app, token, 'POST', '/api/v1/deliveries', {
    name: deliveryName, pipeline_id: p.id, destination_connection_id: pg.id,
    topics: [`${prefix}.${schema}.items`], table_name_format: `bws_${pid}_\${source.table}`, schema_policy: 'pause',
  });
  assert.equal(s4, 201, JSON.stringify(d));
  delivery = d;
});

after(async () => {
  await browser?.close();
  await app?.stop();
  for (const name of [`cluecdc-capture-${prefix}`, connectorOf(deliveryName)]) {
    await fetch(`${env.CONNECT_URL}/connectors/${name}`, { method: 'DELETE' }).catch(() => {});
  }
  await dropCaptureFixture(slot, schema);
  try { dest(`DROP TABLE IF EXISTS ${destTable};`); } catch (e) { console.error(e.message); }
  releaseProvider();
});

/** Elements that stick out of the viewport sideways (tables scroll inside their wrapper). */
function tooWide(page) {
  return page.evaluate(() => {
    const width = document.documentElement.clientWidth;
    return [...document.querySelectorAll('body *')]
      .filter((e) => !e.closest('.table-wrap') && !e.closest('pre') && (e.getBoundingClientRect().right > width + 1))
      .map((e) => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}.${[...e.classList].join('.')}: ${Math.round(e.getBoundingClientRect().right)}px`)
      .slice(0, 10);
  });
}

test('the pipeline page shows the schema timeline and the delivery page its verdict and policy', async () => {
  await until('the snapshot in the destination', () => { try { return dest(`SELECT count(*) FROM ${destTable}`) === '1'; } catch { return false; } });
  // A change is judged against the destination as the guard's previous cycle sampled it: two
  // cycles to see the table the sink has just created.
  await sleep(3000);
  source(`ALTER TABLE ${schema}.items ADD COLUMN note text; INSERT INTO ${schema}.items (id, code, note) VALUES (2, 'pear', 'ripe');`);
  let last;
  await until('the added column judged', async () => {
    const [, s] = await api(app, token, 'GET', `/api/v1/pipelines/${pipeline.id}/schema`);
    last = s;
    return s.tables?.find((t) => t.table === `${schema}.items`)?.verdicts?.[0]?.to_version === 2;
  }).catch((e) => { console.log(JSON.stringify(last), app.log().split('\n').filter((l) => /schema|WARN|ERROR/.test(l)).slice(-30).join('\n')); throw e; });
  source(`ALTER TABLE ${schema}.items DROP COLUMN price;`);
  await until('the guard pauses the delivery', async () => {
    const [, d] = await api(app, token, 'GET', `/api/v1/deliveries/${delivery.id}`);
    return d.connector?.desired_state === 'paused';
  });

  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.goto(`${app.url}/pipelines/${pipeline.id}`);
  await htmxReady(page);
  const card = page.locator('#schema');
  await card.scrollIntoViewIfNeeded();
  const text = await card.innerText();
  assert.match(text, /v1 first seen/);
  assert.match(text, /v3 first seen/);
  assert.match(text, /Newest change\s+column `price` dropped/);
  assert.match(text, new RegExp(`${deliveryName} · ✕ breaking · v2 → v3 · open · paused by ClueCDC`));
  assert.match(text, /a dropped source column leaves `price`/);
  assert.match(text, /No delivery takes this table/, 'the notes table is taken by no delivery');
  await screenshot(page, 'schema-pipeline');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.deepEqual(await tooWide(page), [], 'no sideways scrolling at 390 px');
  await card.scrollIntoViewIfNeeded();
  await screenshot(page, 'schema-pipeline-390');

  await page.setViewportSize({ width: 1280, height: 900 });
  await page.goto(`${app.url}/deliveries/${delivery.id}`);
  await htmxReady(page);
  const dcard = page.locator('#delivery-schema');
  await dcard.scrollIntoViewIfNeeded();
  const dtext = await dcard.innerText();
  assert.match(dtext, /Schema policy: pause/);
  assert.match(dtext, /Paused by ClueCDC at a breaking change of/);
  assert.match(dtext, /column `price` dropped/);
  assert.match(dtext, /added: the sink will add column `note`/);
  // The connector card says who paused it, not "on request".
  assert.match(await page.locator('main').innerText(), /Paused by ClueCDC at a breaking schema change \(its schema policy is pause/);
  await screenshot(page, 'schema-delivery');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.deepEqual(await tooWide(page), [], 'no sideways scrolling at 390 px');
  await dcard.scrollIntoViewIfNeeded();
  await screenshot(page, 'schema-delivery-390');

  // The edit form carries the policy.
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.goto(`${app.url}/deliveries/${delivery.id}/edit`);
  assert.equal(await page.getByLabel('Schema policy').inputValue(), 'pause');
  assert.deepEqual(errors, []);
  await page.close();
});
