import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api } from './harness.mjs';

let app, browser, token;
const name = `browser-${process.pid}`;
const connect = process.env.CONNECT_URL;

before(async () => {
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h' } });
  createUser(app, 'ada', 'admin');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await app?.stop();
  if (connect) await fetch(`${connect}/connectors/${name}`, { method: 'DELETE' }).catch(() => {});
});

test('the connectors page shows a desired connector turning RUNNING by itself, with its detail and the cluster pages', async () => {
  assert.ok(connect && process.env.KAFKA_BOOTSTRAP, 'run under scripts/test (it exports scripts/stack env)');
  const [s1, cluster] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: connect });
  assert.equal(s1, 201);
  const [s2] = await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'stack kafka', bootstrap_servers: process.env.KAFKA_BOOTSTRAP });
  assert.equal(s2, 201);
  const [s3] = await api(app, token, 'POST', '/api/v1/connectors', {
    name, connect_cluster_id: cluster.id,
    config: { 'connector.class': 'org.apache.kafka.connect.file.FileStreamSourceConnector', file: '/dev/null', topic: name },
  });
  assert.equal(s3, 201);

  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.getByRole('link', { name: 'Connectors' }).click();
  // No reload: the rows refresh themselves with htmx.
  await page.locator(`#connector-rows tr:has-text("${name}") .state-running`).waitFor({ timeout: 60_000 });
  await screenshot(page, 'connectors');
  await page.getByRole('link', { name }).click();
  await page.locator('#connector-status .state-running').waitFor();
  assert.match(await page.locator('#connector-status').innerText(), /running with 1 task/);
  await screenshot(page, 'connector-detail');
  await page.getByRole('button', { name: 'Pause' }).click();
  await page.locator('#connector-status .state-paused').waitFor({ timeout: 30_000 });
  assert.match(await page.locator('main').innerText(), /pause requested/);

  await page.getByRole('link', { name: 'Clusters' }).click();
  assert.match(await page.locator('main').innerText(), /stack kafka/);
  await screenshot(page, 'clusters');
  await page.getByRole('link', { name: 'Topics' }).click();
  assert.match(await page.locator('main').innerText(), /cluecdc-connect-configs|connect/);
  await screenshot(page, 'topics');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});
