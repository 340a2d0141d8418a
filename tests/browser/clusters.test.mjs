import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api } from './harness.mjs';

let app, browser, token;
before(async () => {
  app = await startApp({ env: { CLUECDC_LEAK_SCAN_INTERVAL: '1h' } });
  createUser(app, 'ada', 'admin');
  createUser(app, 'val', 'viewer');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
});
after(async () => { await browser?.close(); await app?.stop(); });

test('an admin registers Kafka and Connect from the Clusters page, with inline errors first and the provider token shown once', async () => {
  const env = process.env;
  assert.ok(env.CONNECT_URL && env.KAFKA_BOOTSTRAP, 'run under scripts/test (it exports scripts/stack env)');
  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.getByRole('link', { name: 'Clusters' }).click();

  // Kafka: a bad address and SASL without a user are refused next to their fields.
  await page.getByLabel('Name', { exact: true }).first().fill('stack kafka');
  await page.getByLabel('Bootstrap servers').fill('kafka-without-port');
  await page.getByLabel('Security protocol').selectOption('SASL_PLAINTEXT');
  await page.getByLabel('SASL password').fill('kafka-secret-typed');
  await page.getByRole('button', { name: 'Register Kafka cluster' }).click();
  assert.match(await page.locator('#k-bootstrap-error').innerText(), /host:port/);
  assert.match(await page.locator('#k-mechanism-error').innerText(), /./);
  assert.equal(await page.getByLabel('Name', { exact: true }).first().inputValue(), 'stack kafka', 'what was typed stays');
  assert.ok(!(await page.content()).includes('kafka-secret-typed'), 'the password is not echoed back');
  await screenshot(page, 'clusters-invalid');
  assert.equal((await api(app, token, 'GET', '/api/v1/kafka-clusters'))[1].items.length, 0, 'a refused form stores nothing');
  await page.getByLabel('Bootstrap servers').fill(env.KAFKA_BOOTSTRAP);
  await page.getByLabel('Security protocol').selectOption('PLAINTEXT');
  await page.getByRole('button', { name: 'Register Kafka cluster' }).click();
  assert.match(await page.locator('main').innerText(), /Kafka cluster stack kafka registered/);

  // Connect (its form is open while none is registered): the token and worker settings, once.
  await page.locator('#c-name').fill('stack connect');
  await page.locator('#c-url').fill('not a url');
  await page.getByRole('button', { name: 'Register Connect cluster' }).click();
  assert.match(await page.locator('#c-url-error').innerText(), /http/);
  await page.locator('#c-url').fill(env.CONNECT_URL);
  await page.locator('#c-kafka').selectOption({ label: 'stack kafka' });
  await page.getByRole('button', { name: 'Register Connect cluster' }).click();
  const shown = await page.locator('#created-token').innerText();
  assert.match(shown, /config\.providers\.cluecdc\.class=io\.cluecdc\.connect\.ClueCdcConfigProvider/);
  assert.match(shown, new RegExp(`config\\.providers\\.cluecdc\\.param\\.url=${app.url.replace(/[.]/g, '\\.')}`));
  assert.match(shown, /^config\.providers\.cluecdc\.param\.token=cdcp_[A-Za-z0-9_-]{43}$/m, 'the whole base64url alphabet (- and _ included)');
  await screenshot(page, 'clusters-created');
  await page.goto(app.url + '/clusters');
  assert.equal(await page.locator('#created-token').count(), 0, 'the token is shown only once');
  const [, clusters] = await api(app, token, 'GET', '/api/v1/connect-clusters');
  assert.equal(clusters.items.length, 1);
  assert.ok(!JSON.stringify(clusters).includes('cdcp_'), 'the API never shows the token again');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));

  // A viewer sees the clusters and no registration forms.
  const viewer = await browser.newPage();
  await signIn(viewer, app, 'val');
  await viewer.goto(app.url + '/clusters');
  assert.match(await viewer.locator('main').innerText(), /stack kafka/);
  assert.equal(await viewer.locator('form[action^="/clusters/"]').count(), 0);
});
