import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api } from './harness.mjs';

let app, browser, token;
before(async () => {
  app = await startApp({ env: { CLUECDC_MONITOR_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h' } });
  createUser(app, 'ada', 'admin');
  createUser(app, 'val', 'viewer');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
});
after(async () => { await browser?.close(); await app?.stop(); });

test('an admin acknowledges a firing alert, tunes a rule with inline errors, and manages webhooks; a viewer only reads', async () => {
  // A Kafka cluster nobody answers for: the unreachable alert fires at once.
  assert.equal((await api(app, token, 'PATCH', '/api/v1/alert-rules/kafka_unreachable', { for_secs: 0 }))[0], 200);
  assert.equal((await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'nowhere', bootstrap_servers: '127.0.0.1:9' }))[0], 201);
  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  for (let i = 0; i < 60; i++) {
    await page.goto(app.url + '/alerts');
    if (await page.locator('tr:has-text("nowhere") .state-failed').count()) break;
    await new Promise((r) => setTimeout(r, 1000));
  }
  const row = page.locator('tr:has-text("nowhere")');
  assert.match(await row.innerText(), /firing/);
  assert.match(await row.innerText(), /check the brokers at 127\.0\.0\.1:9/, 'the alert says what to check next');
  await row.getByRole('button', { name: 'Acknowledge' }).click();
  await page.waitForURL(/\/alerts$/);
  assert.match(await page.locator('main').innerText(), /Acknowledged: it stays open/);
  assert.match(await page.locator('tr:has-text("nowhere")').innerText(), /Acknowledged by ada/);

  // A rule refused: the error sits next to its field, and nothing changed.
  await page.getByLabel('threshold of delivery_lag_records').fill('lots');
  await page.getByLabel('duration of delivery_lag_records in seconds').fill('999999');
  await page.locator('#rule-delivery_lag_records').getByRole('button', { name: 'Save' }).click();
  assert.match(await page.locator('#rule-delivery_lag_records-threshold-error').innerText(), /a number/);
  await screenshot(page, 'alerts-rule-invalid');
  let rules = (await api(app, token, 'GET', '/api/v1/alert-rules'))[1].items;
  assert.equal(rules.find((r) => r.kind === 'delivery_lag_records').threshold, 10000, 'a refused change changes nothing');
  await page.getByLabel('threshold of delivery_lag_records').fill('500');
  await page.getByLabel('duration of delivery_lag_records in seconds').fill('999999');
  await page.locator('#rule-delivery_lag_records').getByRole('button', { name: 'Save' }).click();
  assert.match(await page.locator('#rule-delivery_lag_records-for-error').innerText(), /0 to 86400/);
  await page.getByLabel('duration of delivery_lag_records in seconds').fill('120');
  await page.getByLabel('delivery_lag_records enabled').uncheck();
  await page.locator('#rule-delivery_lag_records').getByRole('button', { name: 'Save' }).click();
  assert.match(await page.locator('main').innerText(), /Rule delivery_lag_records saved/);
  rules = (await api(app, token, 'GET', '/api/v1/alert-rules'))[1].items;
  const saved = rules.find((r) => r.kind === 'delivery_lag_records');
  assert.deepEqual([saved.threshold, saved.for_secs, saved.enabled], [500, 120, false]);

  // Webhooks: a short secret is refused inline and not echoed; a good one is listed, then removed.
  await page.getByLabel('URL').fill('http://127.0.0.1:9/hook');
  await page.getByLabel('Shared signing secret').fill('too-short');
  await page.getByRole('button', { name: 'Add webhook' }).click();
  assert.match(await page.locator('#webhook-secret-error').innerText(), /at least 16/);
  assert.equal(await page.getByLabel('URL').inputValue(), 'http://127.0.0.1:9/hook', 'the URL is kept');
  assert.equal(await page.getByLabel('Shared signing secret').inputValue(), '', 'the secret is not echoed back');
  await page.getByLabel('Shared signing secret').fill('a-long-enough-shared-secret');
  await page.getByRole('button', { name: 'Add webhook' }).click();
  assert.match(await page.locator('main').innerText(), /Webhook added/);
  assert.ok(!(await page.content()).includes('a-long-enough-shared-secret'));
  await screenshot(page, 'alerts');
  await page.locator('li:has-text("127.0.0.1:9/hook")').getByRole('button', { name: 'Remove' }).click();
  assert.match(await page.locator('main').innerText(), /Webhook removed/);
  assert.equal((await api(app, token, 'GET', '/api/v1/webhooks'))[1].items.length, 0);
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));

  // A viewer sees alerts and rules, and no buttons or webhook settings.
  const viewer = await browser.newPage();
  await signIn(viewer, app, 'val');
  await viewer.goto(app.url + '/alerts');
  assert.match(await viewer.locator('tr:has-text("nowhere")').innerText(), /firing/);
  assert.equal(await viewer.getByRole('button', { name: /Acknowledge|Save|Add webhook/ }).count(), 0);
  assert.equal(await viewer.locator('#webhooks-heading').count(), 0);
});
