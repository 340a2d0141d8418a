import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api, htmxReady } from './harness.mjs';

const hookSecret = 'browser-hook-secret-0123456789';
let app, browser, token;
before(async () => {
  // The server holds the variable the document names, and never reads it for a request.
  app = await startApp({ env: { CLUECDC_LEAK_SCAN_INTERVAL: '1h', BROWSER_HOOK_SECRET: hookSecret } });
  createUser(app, 'ada', 'admin');
  createUser(app, 'vera', 'viewer');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
});
after(async () => { await browser?.close(); await app?.stop(); });

test('an admin downloads the export, plans a pasted document (a typo refused by its path), applies it, and finds the change set in the audit trail', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  // One Settings entry in the main navigation; the section's own links lead on.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Settings' }).click();
  await page.waitForURL(/\/settings\/users$/);
  await page.getByRole('navigation', { name: 'Settings' }).getByRole('link', { name: 'Configuration' }).click();
  await page.waitForURL(/\/settings\/configuration$/);
  assert.equal(await page.getByRole('navigation', { name: 'Settings' }).getByRole('link', { name: 'Configuration' }).getAttribute('aria-current'), 'page');
  // The main navigation fits one line at 1280 px (it wrapped before the section was folded).
  const navHeight = await page.getByRole('navigation', { name: 'Main' }).evaluate((n) => n.getBoundingClientRect().height);
  const linkHeight = await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Overview' }).evaluate((a) => a.getBoundingClientRect().height);
  assert.ok(navHeight < linkHeight * 1.8, `main navigation on one line: ${navHeight}px for links ${linkHeight}px high`);
  await htmxReady(page);

  // The export, as the download link gives it.
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Download cluecdc.yaml' }).click()]);
  assert.equal(download.suggestedFilename(), 'cluecdc.yaml');
  const exported = await (await fetch(app.url + '/api/v1/export', { headers: { authorization: `Bearer ${token}` } })).text();
  assert.match(exported, /^apiVersion: cluecdc\/v1\n/);
  assert.match(exported, /kind: delivery_lag_records\n  threshold: 10000\.0/);

  // A typo: refused under its path, nothing changed.
  const doc = (threshold, field = 'threshold') => `apiVersion: cluecdc/v1
alert_rules:
- kind: delivery_lag_records
  ${field}: ${threshold}
  for_secs: 300
  enabled: true
webhooks:
- url: http://127.0.0.1:9/hook
  secret: {env: BROWSER_HOOK_SECRET}
`;
  await page.getByLabel(/^Document/).fill(doc(2500, 'treshold'));
  await page.getByRole('button', { name: 'Plan', exact: true }).click();
  const refused = page.getByRole('alert');
  await refused.waitFor();
  assert.match(await refused.innerText(), /The document was refused; nothing changed/);
  assert.match(await refused.innerText(), /alert_rules\[0\]\.treshold: unknown field `treshold`/);
  assert.equal(await page.getByLabel(/^Document/).getAttribute('aria-invalid'), 'true');
  assert.match(await page.getByLabel(/^Document/).inputValue(), /treshold/, 'what was pasted stays');

  // Fixed, but the new webhook's secret is a reference the server does not read itself:
  // refused by its path, and a field for its value appears.
  await page.getByLabel(/^Document/).fill(doc(2500));
  await page.getByRole('button', { name: 'Plan', exact: true }).click();
  await page.getByText(/webhooks\[0\]\.secret/).waitFor();
  assert.match(await page.getByRole('alert').innerText(), /webhooks\[0\]\.secret: the server never reads \{env: BROWSER_HOOK_SECRET\} itself/);
  const valueField = (form) => page.locator(form).getByLabel('env BROWSER_HOOK_SECRET', { exact: true });
  assert.equal(await valueField('#document-form').getAttribute('type'), 'password');
  await screenshot(page, 'configuration-reference-refused');

  // With the value typed in: the plan names the changed field with both values, and the new webhook.
  await valueField('#document-form').fill(hookSecret);
  await page.getByRole('button', { name: 'Plan', exact: true }).click();
  await page.getByRole('heading', { name: 'Plan', exact: true }).waitFor();
  assert.equal(await valueField('#document-form').inputValue(), '', 'a value is never rendered back');
  const plan = await page.locator('#plan').innerText();
  assert.match(plan, /1 to create, 1 to change, 0 to delete/);
  assert.match(plan, /change\s+alert_rule\s+delivery_lag_records\s+threshold\s+10000\.0\s+2500\.0/);
  assert.match(plan, /create\s+webhook\s+http:\/\/127\.0\.0\.1:9\/hook/);
  assert.doesNotMatch(await page.content(), new RegExp(hookSecret), 'the secret is never on the page');
  await screenshot(page, 'configuration-plan');
  let rules = (await api(app, token, 'GET', '/api/v1/alert-rules'))[1].items;
  assert.equal(rules.find((r) => r.kind === 'delivery_lag_records').threshold, 10000, 'planning changes nothing');

  await valueField('#plan').fill(hookSecret);
  await page.getByRole('button', { name: 'Apply 2 changes' }).click();
  await page.getByRole('heading', { name: 'Applied', exact: true }).waitFor();
  const report = await page.locator('#report').innerText();
  assert.match(report, /change alert_rule "delivery_lag_records"/);
  assert.match(report, /create webhook "http:\/\/127\.0\.0\.1:9\/hook"/);
  rules = (await api(app, token, 'GET', '/api/v1/alert-rules'))[1].items;
  assert.equal(rules.find((r) => r.kind === 'delivery_lag_records').threshold, 2500);
  assert.equal((await api(app, token, 'GET', '/api/v1/webhooks'))[1].items.length, 1);
  await screenshot(page, 'configuration-applied');

  // The same document again: nothing to do.
  await page.getByLabel(/^Document/).fill(doc(2500));
  await page.getByRole('button', { name: 'Plan', exact: true }).click();
  await page.getByText('ClueCDC already matches the document.').waitFor();

  // The change set in the audit trail: the apply and what it did, with the actor.
  await page.goto(app.url + '/settings/configuration');
  await page.getByLabel(/^Document/).fill(doc(3000));
  await page.getByRole('button', { name: 'Plan', exact: true }).click();
  await page.getByRole('button', { name: 'Apply 1 change' }).click();
  await page.getByRole('link', { name: 'This change set in the audit trail' }).click();
  await page.waitForURL(/\/audit\?request=/);
  const audit = await page.locator('main table').innerText();
  assert.match(audit, /config\.apply/);
  assert.match(audit, /alert_rule\.update/);
  assert.match(audit, /ada/);
  assert.deepEqual(errors, []);
});

test('a viewer has no configuration page and cannot export', async () => {
  const page = await browser.newPage();
  await signIn(page, app, 'vera');
  assert.equal(await page.getByRole('link', { name: 'Configuration' }).count(), 0);
  assert.equal(await page.getByRole('link', { name: 'Settings' }).count(), 0);
  const res = await page.goto(app.url + '/settings/configuration');
  assert.equal(res.status(), 403);
  const dl = await page.goto(app.url + '/settings/configuration/export');
  assert.equal(dl.status(), 403);
});
