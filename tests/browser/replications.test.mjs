import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { renameSync, writeFileSync } from 'node:fs';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api, psql, dropCaptureFixture, pointProviderAt, releaseProvider } from './harness.mjs';

const env = process.env;
const pid = process.pid;
const schema = `bwr_${pid}`;
const prefix = `bwr-${pid}`;
const slot = `bwr_${pid}`;
const name = `bw${pid} dr`;
const connectorOf = (kind) => `cluecdc-mirror-bw${pid}-dr-${kind}`;
let app, browser, token, pipeline, kafka, dr, connect;

const source = (sql) => psql(env.PG_SOURCE_DB, sql);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h', CLUECDC_MONITOR_INTERVAL: '2s' } });
  createUser(app, 'ada', 'admin');
  createUser(app, 'otto', 'operator');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
  source(`CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.orders (id int PRIMARY KEY, total int); INSERT INTO ${schema}.orders VALUES (1, 9), (2, 12);`);
  [, connect] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: env.CONNECT_URL });
  await pointProviderAt(app, connect);
  [, kafka] = await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'stack kafka', bootstrap_servers: env.KAFKA_BOOTSTRAP });
  [, dr] = await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'dr', bootstrap_servers: env.KAFKA2_BOOTSTRAP });
  const [, src] = await api(app, token, 'POST', '/api/v1/connections', {
    name: 'shop db', provider: 'POSTGRESQL', capabilities: ['SOURCE'],
    settings: { host: env.PG_HOST, port: Number(env.PG_PORT), database: env.PG_SOURCE_DB, user: env.PG_USER, tls_mode: 'disable', slot_name: slot, publication_name: slot },
    secrets: { password: env.PG_PASSWORD },
  });
  const [s, p] = await api(app, token, 'POST', '/api/v1/pipelines', {
    name: 'shop', source_connection_id: src.id, kafka_cluster_id: kafka.id, connect_cluster_id: connect.id,
    tables: [`${schema}.orders`], topic_prefix: prefix,
  });
  assert.equal(s, 201, JSON.stringify(p));
  pipeline = p;
});

after(async () => {
  const [, list] = await api(app, token, 'GET', '/api/v1/replications');
  for (const r of list?.items ?? []) await api(app, token, 'DELETE', `/api/v1/replications/${r.id}`);
  await browser?.close();
  await app?.stop();
  for (const c of [`cluecdc-capture-${prefix}`, connectorOf('source'), connectorOf('checkpoint'), connectorOf('heartbeat')]) {
    await fetch(`${env.CONNECT_URL}/connectors/${c}`, { method: 'DELETE' }).catch(() => {});
  }
  await dropCaptureFixture(slot, schema);
  releaseProvider();
});

test('an operator creates a replication from the page: the same cluster twice is refused inline, the preview shows the topics it takes, and the new replication runs with its lag', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = watchConsole(page);
  await signIn(page, app, 'otto');
  await page.getByRole('link', { name: 'Replications', exact: true }).click();
  await page.getByRole('link', { name: 'Create replication' }).click();
  await page.getByLabel('Name', { exact: true }).fill(name);
  await page.getByLabel('Source Kafka cluster').selectOption(kafka.id);
  await page.getByLabel('Target Kafka cluster').selectOption(kafka.id);
  await page.getByLabel('Connect cluster that runs it').selectOption(connect.id);
  await page.getByLabel('Topics (regular expressions, comma-separated)').fill(`${prefix}\\..*`);
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/replications/new')),
    page.getByRole('button', { name: 'Preview' }).click(),
  ]);
  assert.equal(refused.status(), 422);
  assert.match(await page.locator('#target-error').innerText(), /is the source too/);
  assert.equal(await page.getByLabel('Name', { exact: true }).inputValue(), name, 'what was typed stays');

  await page.getByLabel('Target Kafka cluster').selectOption(dr.id);
  // The pipeline's topic exists once its snapshot ran.
  const topic = `${prefix}.${schema}.orders`;
  for (let i = 0; i < 120; i++) {
    const [, t] = await api(app, token, 'GET', `/api/v1/kafka-clusters/${kafka.id}/topics?q=${topic}`);
    if ((t.items ?? []).some((x) => x.name === topic && x.partitions[0].high_watermark >= 2)) break;
    await sleep(500);
  }
  // This time by pipeline instead of a pattern: the pattern becomes the pipeline's prefix.
  await page.getByLabel('Topics (regular expressions, comma-separated)').fill('');
  await page.getByLabel('Or the topics of a pipeline').selectOption(pipeline.id);
  await page.getByRole('button', { name: 'Preview' }).click();
  const review = page.getByRole('region', { name: 'What it copies' });
  await review.waitFor({ timeout: 60_000 });
  assert.match(await review.innerText(), new RegExp(`stack-kafka\\.${prefix}\\.${schema}\\.orders`), 'the name each topic gets on the target');
  assert.match(await review.innerText(), /The MirrorMaker plugin accepts all three configs/);
  await screenshot(page, 'replication-preview');
  await page.getByRole('button', { name: 'Create replication' }).click();
  await page.waitForURL(/\/replications\/rp_[0-9a-f]+$/, { timeout: 60_000 });
  assert.match(await page.locator('main').innerText(), new RegExp(`Replication ${name} created`));
  // The page refreshes itself: the connectors come up and the lag falls to 0.
  await page.locator('#replication-status .state-running').nth(1).waitFor({ timeout: 120_000 });
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const rows = await page.locator(`#replication-status tr:has-text("${topic}")`).count();
    if (rows > 0 && (await page.locator('#lag-records').innerText()) === '0') break;
    await sleep(1000);
  }
  assert.equal(await page.locator('#lag-records').innerText(), '0', 'every record copied');
  assert.match(await page.getByRole('region', { name: 'Replication lag' }).innerText(), new RegExp(`stack-kafka\\.${prefix}`));
  await screenshot(page, 'replication-detail');
  // The overview lists it beside pipelines and deliveries, with its figure.
  await page.getByRole('link', { name: 'Overview', exact: true }).click();
  const row = page.locator(`tr:has-text("${name}")`);
  for (let i = 0; i < 30 && !/records not copied/.test(await row.innerText()); i++) {
    await sleep(1000);
    await page.reload();
  }
  assert.match(await row.innerText(), /replication/);
  assert.match(await row.innerText(), /0 records not copied/, 'the monitor\'s latest sample');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});

test('an operator changes the replication from its page (a wrong group pattern refused inline, the preview, saved into Connect) and restarts it', async () => {
  const [, list] = await api(app, token, 'GET', '/api/v1/replications');
  const r = (list.items ?? []).find((x) => x.name === name);
  assert.ok(r, 'the replication created by the test before');
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = watchConsole(page);
  await signIn(page, app, 'otto');
  await page.goto(`${app.url}/replications/${r.id}`);
  await page.getByRole('link', { name: 'Edit…' }).click();
  await page.waitForURL(new RegExp(`/replications/${r.id}/edit$`));
  // What cannot change is shown, not offered.
  assert.match(await page.locator('#fixed').innerText(), /default \(copies named stack-kafka\.<topic>\)/);
  assert.equal(await page.getByLabel('Or the topics of a pipeline').inputValue(), pipeline.id, 'chosen by pipeline');
  const pattern = `${prefix}\\.${schema}\\..*`;
  await page.getByLabel('Or the topics of a pipeline').selectOption('');
  await page.getByLabel('Topics (regular expressions, comma-separated)').fill(pattern);
  await page.getByLabel('Consumer groups to checkpoint').fill('(');
  const [refused] = await Promise.all([
    page.waitForResponse((res) => res.request().method() === 'POST' && res.url().endsWith(`/replications/${r.id}/edit`)),
    page.getByRole('button', { name: 'Preview' }).click(),
  ]);
  assert.equal(refused.status(), 422);
  assert.match(await page.locator('#groups-error').innerText(), /not a regular expression/);
  assert.equal(await page.getByLabel('Topics (regular expressions, comma-separated)').inputValue(), pattern, 'what was typed stays');

  await page.getByLabel('Consumer groups to checkpoint').fill(`bw-${pid}-.*`);
  await page.getByLabel(/Write translated group offsets to the target/).check();
  await page.getByRole('button', { name: 'Preview' }).click();
  const review = page.getByRole('region', { name: 'What it copies' });
  await review.waitFor({ timeout: 60_000 });
  assert.match(await review.innerText(), new RegExp(`stack-kafka\\.${prefix}\\.${schema}\\.orders`));
  assert.match(await review.innerText(), /The MirrorMaker plugin accepts all three configs/);
  await screenshot(page, 'replication-edit');
  await page.getByRole('button', { name: 'Save changes' }).click();
  await page.waitForURL(new RegExp(`/replications/${r.id}$`), { timeout: 60_000 });
  assert.match(await page.locator('main').innerText(), /Saved; the reconciler gives the connectors whose config changed to Connect/);
  assert.match(await page.locator('.lede').innerText(), new RegExp(pattern.replace(/[\\.*]/g, (c) => `\\${c}`)));
  // Connect has the new configs.
  let source, checkpoint;
  for (let i = 0; i < 60; i++) {
    source = await (await fetch(`${env.CONNECT_URL}/connectors/${connectorOf('source')}/config`)).json();
    checkpoint = await (await fetch(`${env.CONNECT_URL}/connectors/${connectorOf('checkpoint')}/config`)).json();
    if (source.topics === pattern && checkpoint.groups === `bw-${pid}-.*` && checkpoint['sync.group.offsets.enabled'] === 'true') break;
    await sleep(1000);
  }
  assert.equal(source.topics, pattern);
  assert.equal(checkpoint.groups, `bw-${pid}-.*`);
  assert.equal(checkpoint['sync.group.offsets.enabled'], 'true');

  // Restart: asked of the reconciler, recorded as the operator's.
  await page.getByRole('button', { name: 'Restart' }).click();
  await page.waitForURL(new RegExp(`/replications/${r.id}$`));
  assert.match(await page.locator('main').innerText(), /Restart requested: the reconciler restarts the three connectors/);
  for (const kind of ['source', 'checkpoint', 'heartbeat']) {
    let restarts = [];
    for (let i = 0; i < 60 && !restarts.some((x) => x.triggered_by === 'user:otto'); i++) {
      const [, c] = await api(app, token, 'GET', `/api/v1/connectors/${connectorOf(kind)}`);
      restarts = c.restarts ?? [];
      if (!restarts.some((x) => x.triggered_by === 'user:otto')) await sleep(500);
    }
    assert.ok(restarts.some((x) => x.triggered_by === 'user:otto'), `${kind}: ${JSON.stringify(restarts)}`);
  }
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});
