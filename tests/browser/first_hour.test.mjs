// The first hour (issue 32): from an empty instance to a source row in a destination table,
// typing one URL (the setup link the server logs) and otherwise clicking only the links and
// buttons the pages show. The test also plays the Connect worker's operator: it starts the
// worker without the config provider, then installs the provider the way the Clusters page says
// (the jar from its link, checked against its checksum line; the worker lines shown once) and
// restarts the worker. It prints the page loads and form submissions the story needed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { startApp, launchBrowser, watchConsole, screenshot, psql, dropCaptureFixture, htmxReady, repoRoot } from './harness.mjs';

const env = process.env;
const tag = randomBytes(4).toString('hex');
const worker = `fh-${tag}`;
const schema = `fh_${tag}`;
const sourceName = `fh ${tag} shop`;
// The connection form derives the slot and publication from the connection's name.
const slot = `cluecdc_fh_${tag}_shop`;
const destName = `fh ${tag} replica`;
const pipelineName = `fh ${tag} orders`;
const prefix = `fh-${tag}`;
const deliveryName = `fh ${tag} to replica`;
const destTable = `fh_${tag}_orders`;
const NAME = 'ada';
const PASSWORD = 'correct horse battery staple';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const source = (sql) => psql(env.PG_SOURCE_DB, sql);
const dest = (sql) => psql(env.PG_DEST_DB, sql);

let app, browser, workerPort, workDir;

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => ok(port)); });
  });
}

/** `scripts/stack ARGS…`, resolved when it exits 0 (a worker takes a few seconds to answer). The
 * script of the checkout whose `.stack` this is: a worktree's `.stack` links to another
 * checkout's, and the script knows its processes by that checkout's path. */
function stack(...args) {
  const dotStack = join(repoRoot, '.stack');
  const root = existsSync(dotStack) ? dirname(realpathSync(dotStack)) : repoRoot;
  return new Promise((ok, fail) => {
    const child = spawn(join(root, 'scripts', 'stack'), args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c) => { out += c; });
    child.stderr.on('data', (c) => { out += c; });
    child.on('exit', (code) => (code === 0 ? ok(out) : fail(new Error(`scripts/stack ${args.join(' ')} exited ${code}:\n${out}`))));
  });
}

before(async () => {
  assert.ok(env.CLUECDC_PROVIDER_JAR && env.KAFKA_BOOTSTRAP && env.PG_SOURCE_DB && env.PG_DEST_DB, 'run with the stack env (scripts/stack env)');
  workDir = mkdtempSync(join(tmpdir(), 'cluecdc-first-hour-'));
  workerPort = await freePort();
  // The worker's operator starts a worker without the provider while ClueCDC starts.
  const started = stack('worker', 'up', worker, String(workerPort));
  started.catch(() => {}); // awaited below; a failure fails the hook there
  app = await startApp({
    env: {
      CLUECDC_PROVIDER_JAR: env.CLUECDC_PROVIDER_JAR, CLUECDC_RECONCILE_INTERVAL: '1s',
      CLUECDC_MONITOR_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h',
    },
  });
  browser = await launchBrowser();
  source(`CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.orders (id int PRIMARY KEY, item text NOT NULL); INSERT INTO ${schema}.orders VALUES (1, 'first');`);
  await started;
});

after(async () => {
  await browser?.close();
  await app?.stop();
  const connect = `http://127.0.0.1:${workerPort}`;
  for (const name of [`cluecdc-capture-${prefix}`, `cluecdc-deliver-${deliveryName.replace(/[^a-z0-9]/g, '-')}`]) {
    await fetch(`${connect}/connectors/${name}`, { method: 'DELETE' }).catch(() => {});
  }
  await stack('worker', 'down', worker).catch((e) => console.error(e.message));
  await dropCaptureFixture(slot, schema);
  try { dest(`DROP TABLE IF EXISTS ${destTable};`); } catch (e) { console.error(e.message); }
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

test('a newcomer goes from an empty instance to a source row in the destination by following the pages', { timeout: 900_000 }, async () => {
  const t0 = Date.now();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = watchConsole(page);
  let loads = 0;
  let submissions = 0;
  page.on('load', () => { loads += 1; });
  /** A form submission: a click on a submit button the page shows. */
  const submit = async (button) => { submissions += 1; await button.click(); };
  const overview = async () => {
    await page.getByRole('link', { name: 'Overview' }).click();
    await page.waitForURL(app.url + '/');
    await page.locator('#getting-started li[data-step]').first().waitFor({ timeout: 60_000 });
  };
  const step = (id) => page.locator(`#getting-started li[data-step="${id}"]`);
  const stateOf = async (id) => step(id).getAttribute('data-state');

  // 1. The one typed URL: the setup link the server logs for an empty instance.
  let setupUrl;
  for (let i = 0; i < 50 && !setupUrl; i++) {
    setupUrl = app.log().match(/setup_url=(\S+)/)?.[1];
    if (!setupUrl) await sleep(100);
  }
  assert.ok(setupUrl?.startsWith(app.url + '/setup?token='), 'the server logs the setup link: ' + app.log());
  await page.goto(setupUrl);
  await page.getByLabel('Name').fill(NAME);
  await page.getByLabel('Password', { exact: true }).fill(PASSWORD);
  await page.getByLabel('Password again').fill(PASSWORD);
  await submit(page.getByRole('button', { name: 'Create admin and sign in' }));
  await page.waitForURL(app.url + '/');
  await page.locator('#getting-started li[data-step]').first().waitFor({ timeout: 60_000 });
  assert.match(await page.locator('main').innerText(), new RegExp(`Welcome, ${NAME}`));
  for (const id of ['kafka', 'connect', 'provider', 'source', 'pipeline', 'delivery']) {
    assert.equal(await stateOf(id), 'todo', `${id} is to do on an empty instance`);
  }
  await screenshot(page, 'first-hour-1-empty');

  // 2. Kafka, from the checklist's link.
  await page.locator('#step-kafka').click();
  await page.waitForURL(app.url + '/clusters');
  await page.locator('#k-name').fill('stack kafka');
  await page.locator('#k-bootstrap').fill(env.KAFKA_BOOTSTRAP);
  await submit(page.getByRole('button', { name: 'Register Kafka cluster' }));
  assert.match(await page.locator('main').innerText(), /Kafka cluster stack kafka registered/);
  await overview();
  assert.equal(await stateOf('kafka'), 'done', await step('kafka').innerText());
  assert.equal(await stateOf('connect'), 'todo');

  // Connect: the worker has no provider yet.
  await page.locator('#step-connect').click();
  await page.waitForURL(app.url + '/clusters');
  await page.locator('#c-name').fill('stack connect');
  await page.locator('#c-url').fill(`http://127.0.0.1:${workerPort}`);
  await page.locator('#c-kafka').selectOption({ label: 'stack kafka' });
  await submit(page.getByRole('button', { name: 'Register Connect cluster' }));
  const lines = await page.locator('#created-token').innerText();
  const providerUrl = lines.match(/^config\.providers\.cluecdc\.param\.url=(\S+)$/m)?.[1];
  const providerToken = lines.match(/^config\.providers\.cluecdc\.param\.token=(\S+)$/m)?.[1];
  assert.ok(providerUrl && providerToken, 'the worker lines with the token: ' + lines);
  assert.ok(await page.locator('#provider-jar').evaluate((d) => d.open), 'the jar card is open beside the new token');
  const jarHref = await page.getByRole('link', { name: 'cluecdc-config-provider.jar' }).getAttribute('href');
  const sha = (await page.locator('#provider-jar-curl').innerText()).match(/^echo '([0-9a-f]{128})  cluecdc-config-provider\.jar' \| sha512sum -c$/m)?.[1];
  assert.ok(sha, 'the checksum line');
  await screenshot(page, 'first-hour-2-connect-registered');

  // 3. The provider check fails on this worker: the jar is missing.
  await overview();
  assert.equal(await stateOf('connect'), 'done', await step('connect').innerText());
  assert.equal(await stateOf('provider'), 'failing', await step('provider').innerText());
  assert.match(await step('provider').innerText(), /provider jar missing/);
  await screenshot(page, 'first-hour-3-provider-failing');
  await page.locator('#step-provider').click();
  await page.waitForURL(/\/clusters\/connect\/[^/]+$/);
  await page.locator('#provider-check tr[data-verdict="jar_missing"]').waitFor({ timeout: 60_000 });
  assert.match(await page.locator('#provider-check').innerText(), /plugin\.path/, 'the fix names the plugin path');
  await screenshot(page, 'first-hour-4-worker-jar-missing');

  // The operator installs it as the Clusters page said: the jar from its link, checked against
  // the page's checksum, in a directory of its own; the worker lines' url and token; a restart.
  const jar = await page.request.get(new URL(jarHref, app.url).href);
  assert.equal(jar.status(), 200);
  const body = await jar.body();
  assert.equal(createHash('sha512').update(body).digest('hex'), sha, 'the download matches the checksum line');
  const pluginDir = join(workDir, 'plugins');
  mkdirSync(join(pluginDir, 'cluecdc-config-provider'), { recursive: true });
  writeFileSync(join(pluginDir, 'cluecdc-config-provider', 'cluecdc-config-provider.jar'), body);
  const providerFile = join(workDir, 'cluecdc-provider.properties');
  writeFileSync(providerFile + '.tmp', `url=${providerUrl}\ntoken=${providerToken}\n`);
  renameSync(providerFile + '.tmp', providerFile);
  await stack('worker', 'up', worker, String(workerPort), '--plugin-dir', pluginDir, '--provider-file', providerFile);

  // "Check every worker now" until the restarted worker answers (it may still be joining).
  await htmxReady(page);
  for (let i = 0; ; i++) {
    await Promise.all([
      page.waitForResponse((r) => r.url().includes('/provider-check'), { timeout: 60_000 }),
      submit(page.getByRole('button', { name: 'Check every worker now' })),
    ]);
    await page.getByRole('button', { name: 'Check every worker now' }).and(page.locator(':enabled')).waitFor();
    await htmxReady(page);
    if (await page.locator('#provider-check tr[data-verdict="passing"]').count() === 1) break;
    assert.ok(i < 20, 'passing within 20 checks: ' + await page.locator('#provider-check').innerText());
    await sleep(2000);
  }
  assert.match(await page.locator('#provider-check-state').innerText(), /Every worker resolves references here/);
  await screenshot(page, 'first-hour-5-provider-passing');

  // 4. A source connection, from the checklist; tested from its page.
  await overview();
  assert.equal(await stateOf('provider'), 'done', await step('provider').innerText());
  assert.equal(await stateOf('source'), 'todo');
  await page.locator('#step-source').click();
  await page.waitForURL(/\/connections\/new/);
  /** The new connection form, for PostgreSQL, saved. */
  const fillDatabase = async (name, db, capability) => {
    await htmxReady(page);
    if (await page.getByLabel('Provider', { exact: true }).inputValue() !== 'POSTGRESQL') {
      await page.getByLabel('Provider', { exact: true }).selectOption('POSTGRESQL');
      await page.waitForURL(/provider=POSTGRESQL/);
    }
    await page.getByLabel('Name').fill(name);
    await page.getByRole('checkbox', { name: capability }).check();
    await page.getByLabel('Host').fill(env.PG_HOST);
    await page.getByLabel('Port').fill(env.PG_PORT);
    await page.getByLabel('Database').fill(db);
    await page.getByLabel('User').fill(env.PG_USER);
    await page.getByLabel('TLS', { exact: true }).selectOption('disable');
    await page.getByLabel('Password').fill(env.PG_PASSWORD);
    await submit(page.getByRole('button', { name: 'Save connection' }));
    await page.waitForSelector(`h1:has-text("${name}")`);
  };
  await fillDatabase(sourceName, env.PG_SOURCE_DB, /Source/);
  await submit(page.getByRole('button', { name: 'Test connection' }));
  await page.waitForSelector('#test-result .state', { timeout: 60_000 });
  assert.match(await page.locator('#test-result').innerText(), /All checks passed/);
  await screenshot(page, 'first-hour-6-source-tested');

  // A pipeline through the wizard, on the worker with the provider.
  await overview();
  assert.equal(await stateOf('source'), 'done', await step('source').innerText());
  await page.locator('#step-pipeline').click();
  await page.waitForURL(/\/pipelines\/new/);
  await htmxReady(page);
  const sourceSelect = page.getByLabel('1. Source connection');
  if (await page.getByLabel(`${schema}.orders`).count() === 0) {
    const id = await sourceSelect.locator('option', { hasText: sourceName }).getAttribute('value');
    await sourceSelect.selectOption(id);
    await page.waitForURL(/source=/);
  }
  await page.getByLabel(`${schema}.orders`).check();
  await page.getByLabel('Pipeline name').fill(pipelineName);
  await page.getByLabel('Topic prefix').fill(prefix);
  assert.equal(await page.locator('#connect option:checked').innerText(), 'stack connect');
  await submit(page.getByRole('button', { name: '4. Review' }));
  await page.getByText('plugin accepts this config').waitFor({ timeout: 60_000 });
  await submit(page.getByRole('button', { name: '5. Create pipeline' }));
  await page.waitForURL(/\/pipelines\/pl_/, { timeout: 60_000 });
  await page.locator('#pipeline-status .state-running').first().waitFor({ timeout: 120_000 });
  await screenshot(page, 'first-hour-7-pipeline-running');
  await overview();
  assert.equal(await stateOf('pipeline'), 'done', await step('pipeline').innerText());
  assert.equal(await stateOf('delivery'), 'todo');
  await screenshot(page, 'first-hour-7b-checklist-delivery-to-do');

  // 5. A database delivery: the step first leads to adding a destination.
  assert.match(await step('delivery').innerText(), /DESTINATION connection/);
  await page.locator('#step-delivery').click();
  await page.waitForURL(/\/connections\/new/);
  await fillDatabase(destName, env.PG_DEST_DB, /Destination/);
  await overview();
  await page.locator('#step-delivery').click();
  await page.waitForURL(/\/deliveries\/new/);
  await htmxReady(page);
  const pipelineSelect = page.getByLabel('1. Pipeline');
  if (!(await pipelineSelect.inputValue())) {
    await pipelineSelect.selectOption({ label: pipelineName });
    await page.waitForURL(/pipeline_id=pl_/);
    await htmxReady(page);
  }
  const destSelect = page.getByLabel('2. Destination');
  const destId = await destSelect.locator('option', { hasText: destName }).getAttribute('value');
  if (await destSelect.inputValue() !== destId) {
    await destSelect.selectOption(destId);
    await page.waitForURL(new RegExp(`destination_connection_id=${destId}`));
  }
  await page.getByLabel('Table name format').waitFor();
  await page.getByLabel('Delivery name').fill(deliveryName);
  await page.getByLabel('Table name format').fill(`fh_${tag}_\${source.table}`);
  await submit(page.getByRole('button', { name: 'Review', exact: true }));
  await page.getByText('Ready: the destination passed its test').waitFor({ timeout: 60_000 });
  await submit(page.getByRole('button', { name: 'Create delivery' }));
  await page.waitForURL(/\/deliveries\/dl_[0-9a-f]+$/, { timeout: 60_000 });
  await page.locator('#delivery-status .state-running').first().waitFor({ timeout: 120_000 });

  // 6. A source row arrives in the destination.
  source(`INSERT INTO ${schema}.orders VALUES (2, 'from the first hour');`);
  let rows = '';
  for (const deadline = Date.now() + 120_000; Date.now() < deadline; await sleep(2000)) {
    try { rows = dest(`SELECT string_agg(id || ':' || item, ',' ORDER BY id) FROM ${destTable}`); } catch { rows = ''; }
    if (rows === '1:first,2:from the first hour') break;
  }
  assert.equal(rows, '1:first,2:from the first hour', 'the snapshot row and the new row are in the destination');
  await screenshot(page, 'first-hour-8-delivery');

  // The overview no longer shows the checklist once a delivery runs.
  await page.getByRole('link', { name: 'Overview' }).click();
  await page.waitForURL(app.url + '/');
  assert.equal(await page.locator('#getting-started').count(), 0, 'the checklist goes away');
  assert.match(await page.locator(`tr:has-text("${deliveryName}")`).innerText(), /RUNNING/);
  await screenshot(page, 'first-hour-9-overview');

  console.log(`first hour: ${loads} page loads, ${submissions} form submissions (${Math.round((Date.now() - t0) / 1000)} s)`);
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});
