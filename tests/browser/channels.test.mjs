import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { startApp, launchBrowser, watchConsole, screenshot, htmxReady, createUser, createToken, signIn, api } from './harness.mjs';

// The stack's `hooks` component stands in for PagerDuty (it checks the Events API v2 shape).
const HOOKS = process.env.HOOKS_URL;
const CA = readFileSync(process.env.TLS_CA_FILE, 'utf8');
const KEY = 'R0123456789abcdefR0123456789abcd';

let app, browser, token;
before(async () => {
  app = await startApp({ env: { CLUECDC_LEAK_SCAN_INTERVAL: '1h' } });
  createUser(app, 'ada', 'admin');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
});
after(async () => { await browser?.close(); await app?.stop(); });

test('an admin adds a PagerDuty channel past inline errors, presses Send test and reads the delivery log', async () => {
  const tag = `${process.pid}-${Date.now()}`;
  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.goto(app.url + '/alerts');
  await page.getByRole('link', { name: 'Alert channels' }).click();
  await page.getByRole('link', { name: 'PagerDuty' }).click();
  await htmxReady(page);

  // Refused: no name and a short routing key. Errors sit under their fields; nothing is stored.
  await page.getByLabel(/Routing key/).fill('short-key');
  await page.getByRole('button', { name: 'Add PagerDuty channel' }).click();
  await page.locator('#ch-key-error').waitFor();
  assert.match(await page.locator('#ch-key-error').innerText(), /32 letters and digits/);
  assert.match(await page.locator('#ch-name-error').innerText(), /a name of 1 to 100 characters/);
  assert.equal(await page.getByLabel('Name').getAttribute('aria-invalid'), 'true');
  assert.equal(await page.getByLabel(/Routing key/).inputValue(), '', 'the secret is not echoed back');
  assert.ok(!(await page.content()).includes('short-key'));
  await screenshot(page, 'channels-invalid');
  assert.equal((await api(app, token, 'GET', '/api/v1/alert-channels'))[1].items.length, 0);

  await page.getByLabel('Name').fill('on-call pager');
  await page.getByLabel(/Routing key/).fill(KEY);
  await page.getByLabel('Events API endpoint').fill(`${HOOKS}/pagerduty/${tag}/v2/enqueue`);
  await page.getByLabel('CA certificate (PEM, optional)').fill(CA);
  await page.getByLabel('warning').uncheck();
  await page.getByLabel('connector_failed').check();
  await page.getByRole('button', { name: 'Add PagerDuty channel' }).click();
  await page.waitForURL(/\/alerts\/channels\/ch_/);
  assert.match(await page.locator('main').innerText(), /Channel on-call pager saved/);
  assert.match(await page.locator('label[for="ch-key"]').innerText(), /\(set\)/);
  assert.ok(!(await page.content()).includes(KEY), 'the routing key is never rendered');
  await htmxReady(page);

  // Send test: a trigger and its resolve, both accepted, in the log on the same page.
  await page.getByRole('button', { name: 'Send test' }).click();
  await page.locator('#test-area .flash').waitFor();
  assert.match(await page.locator('#test-area .flash').innerText(), /Test sent: the channel answered 202/);
  const log = page.locator('#delivery-log');
  assert.match(await log.innerText(), /test resolve[\s\S]*202[\s\S]*test trigger[\s\S]*202/);
  await screenshot(page, 'channels-test-sent');

  // The channel list shows it with its last delivery.
  await page.goto(app.url + '/alerts/channels');
  const row = page.locator('tr:has-text("on-call pager")');
  assert.match(await row.innerText(), /PagerDuty/);
  assert.match(await row.innerText(), /connector_failed; critical/);
  assert.match(await row.innerText(), /sent/);

  // A Slack URL the receiver does not know: the test fails and the log says why, without the URL.
  const [st, slack] = await api(app, token, 'POST', '/api/v1/alert-channels', {
    name: 'lost slack', kind: 'slack', secrets: { webhook_url: `${HOOKS}/nowhere/${tag}` }, tls_ca_certificate: CA,
  });
  assert.equal(st, 201, JSON.stringify(slack));
  await page.goto(`${app.url}/alerts/channels/${slack.id}`);
  await htmxReady(page);
  await page.getByRole('button', { name: 'Send test' }).click();
  await page.locator('#test-area .flash').waitFor();
  assert.match(await page.locator('#test-area .flash').innerText(), /Test failed \(404\): HTTP 404/);
  assert.ok(!(await page.locator('#delivery-log').innerText()).includes(`/nowhere/${tag}`));
  await screenshot(page, 'channels-test-failed');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});
