// The API reference at /api/docs: Swagger UI embedded in the binary, under the app's
// Content-Security-Policy, talking to this server only, with "Authorize" taking an API token.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startApp, launchBrowser, screenshot, createUser, createToken, signIn } from './harness.mjs';

let app, browser;
before(async () => {
  app = await startApp();
  createUser(app, 'ada', 'admin');
  browser = await launchBrowser();
});
after(async () => { await browser?.close(); await app?.stop(); });

test('the footer leads to the API reference, which renders from this server alone and tries GET /api/v1/me with a pasted token', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const requests = [];
  page.on('request', (r) => requests.push(`${r.method()} ${r.url()}`));
  const consoleErrors = [];
  page.on('console', (msg) => { if (msg.type() === 'error') consoleErrors.push(msg.text()); });
  page.on('pageerror', (err) => consoleErrors.push(String(err)));
  // Every CSP violation, as the page itself sees it (Chromium also logs each as a console error).
  await page.addInitScript(() => {
    window.__cspViolations = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });

  await signIn(page, app, 'ada');
  await Promise.all([page.waitForURL(app.url + '/api/docs'), page.getByRole('link', { name: 'API reference' }).click()]);
  assert.equal(await page.title(), 'API reference · ClueCDC');
  const csp = (await page.request.get(app.url + '/api/docs')).headers()['content-security-policy'];
  assert.match(csp, /script-src 'self';/, 'the reference is served under the app\'s own policy');
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);

  // The operations render from /api/v1/openapi.json.
  const me = page.locator('.opblock.opblock-get').filter({ has: page.locator('.opblock-summary-path[data-path="/api/v1/me"]') });
  await me.waitFor({ timeout: 30_000 });
  const operations = await page.locator('.opblock').count();
  assert.ok(operations > 50, `only ${operations} operations rendered`);
  assert.equal(await page.getByRole('link', { name: 'Back to ClueCDC' }).first().getAttribute('href'), '/');
  const shot = await screenshot(page, 'api-docs');
  console.log(`screenshot: ${shot}; ${operations} operations rendered`);

  // Try it out without a token: the page's requests do not ride on the session cookie.
  await me.locator('.opblock-summary').click();
  await me.getByRole('button', { name: 'Try it out' }).click();
  await me.getByRole('button', { name: 'Execute' }).click();
  const status = me.locator('.live-responses-table .response .response-col_status');
  await status.waitFor();
  assert.equal((await status.innerText()).trim(), '401', 'without a token, the try-out is refused');

  // Authorize with an API token, then the same call answers as ada.
  const token = createToken(app, 'ada');
  await page.locator('.auth-wrapper button.authorize').click();
  const dialog = page.locator('.dialog-ux .modal-ux');
  await dialog.locator('input').first().fill(token);
  await dialog.locator('button.authorize').click();
  await dialog.getByRole('button', { name: 'Close' }).click();
  await me.getByRole('button', { name: 'Execute' }).click();
  await page.waitForFunction(() => document.querySelector('.opblock-get .live-responses-table .response .response-col_status')?.innerText.trim() === '200');
  const body = await me.locator('.live-responses-table .response .response-col_description').innerText();
  assert.match(body, /"name":\s*"ada"/, body);
  assert.match(body, /"role":\s*"admin"/, body);
  await screenshot(page, 'api-docs-try-me');
  // The token went in the Authorization header (the curl Swagger UI shows is what it sent).
  assert.match(await me.locator('.curl-command').innerText(), /Authorization: Bearer cdc_/);

  // Nothing left the server's origin (validator badge off, no fonts, no analytics).
  const origin = new URL(app.url).origin;
  const elsewhere = requests.filter((r) => new URL(r.split(' ')[1]).origin !== origin);
  console.log(`requests (${requests.length}):\n  ${[...new Set(requests)].join('\n  ')}`);
  assert.deepEqual(elsewhere, [], 'requests outside the server');
  assert.deepEqual(await page.evaluate(() => window.__cspViolations), [], 'CSP violations');
  // The one expected console error is the browser's note on the deliberate 401.
  const unexpected = consoleErrors.filter((e) => !/status of 401/.test(e));
  assert.deepEqual(unexpected, [], 'console errors: ' + unexpected.join('\n'));
  assert.equal(consoleErrors.length - unexpected.length, 1, 'exactly the one 401');
});

test('the API reference and its document need sign-in, like every page (API.md), and the page has no inline script', async () => {
  // Under /api/ an anonymous request is answered 401 with the API's error object, never a
  // redirect (as every /api/ route); people reach the page signed in, from the footer.
  const anonymous = await fetch(app.url + '/api/docs', { redirect: 'manual' });
  assert.equal(anonymous.status, 401);
  assert.equal((await anonymous.json()).error.code, 'unauthenticated');
  assert.equal((await fetch(app.url + '/api/v1/openapi.json')).status, 401);
  const token = createToken(app, 'ada');
  const res = await fetch(app.url + '/api/docs', { headers: { authorization: `Bearer ${token}` } });
  assert.equal(res.status, 200);
  const html = await res.text();
  assert.match(html, /<script src="\/static\/swagger-ui\/swagger-ui-bundle\.js" defer><\/script>/);
  assert.doesNotMatch(html.replace(/<script src="[^"]+" defer><\/script>/g, ''), /<script/, 'no inline script');
  for (const asset of ['/static/swagger-ui/swagger-ui-bundle.js', '/static/swagger-ui/swagger-ui.css', '/static/api-docs.js']) {
    assert.equal((await fetch(app.url + asset)).status, 200, asset);
  }
});

test('the API reference stays readable at 320 px wide', async () => {
  const page = await browser.newPage({ viewport: { width: 320, height: 640 } });
  await signIn(page, app, 'ada');
  await page.goto(app.url + '/api/docs');
  await page.locator('.opblock').first().waitFor({ timeout: 30_000 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.ok(overflow <= 0, `/api/docs scrolls sideways by ${overflow}px at 320px`);
  await screenshot(page, 'api-docs-320');
});
