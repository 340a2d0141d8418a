import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, signIn } from './harness.mjs';

let app, browser;
before(async () => {
  app = await startApp();
  createUser(app, 'ada', 'admin');
  browser = await launchBrowser();
});
after(async () => { await browser?.close(); await app?.stop(); });

test('a person signs in, sees the overview with htmx running and no console or CSP errors, and signs out', async () => {
  const page = await browser.newPage();
  const errors = watchConsole(page);
  const res = await page.goto(app.url + '/');
  assert.equal(new URL(page.url()).pathname, '/login', 'anonymous visitors are sent to sign in');
  assert.equal(res.status(), 200);
  await screenshot(page, 'login');
  await signIn(page, app, 'ada');
  assert.equal(await page.title(), 'Overview · ClueCDC');
  await page.waitForFunction(() => typeof window.htmx === 'object');
  assert.match(await page.locator('h1').innerText(), /Overview/);
  assert.match(await page.locator('#system-status').innerText(), /Database\s+● ok/);
  assert.match(await page.locator('.whoami').innerText(), /ada \(admin\)/);
  const shot = await screenshot(page, 'home');
  assert.ok(existsSync(shot));
  await Promise.all([page.waitForURL(/\/login\?signed_out=1$/), page.getByRole('button', { name: 'Sign out' }).click()]);
  assert.match(await page.locator('main').innerText(), /You are signed out/);
  await page.goto(app.url + '/');
  assert.equal(new URL(page.url()).pathname, '/login', 'after signing out the overview needs a sign-in again');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});

test('a wrong password shows an inline message and keeps the name', async () => {
  const page = await browser.newPage();
  await page.goto(app.url + '/login');
  await page.getByLabel('Name').fill('ada');
  await page.getByLabel('Password').fill('not the password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForSelector('#login-error');
  assert.match(await page.locator('#login-error').innerText(), /do not match/);
  assert.equal(await page.getByLabel('Name').inputValue(), 'ada');
});

test('the pages stay readable at 320 px wide', async () => {
  const page = await browser.newPage({ viewport: { width: 320, height: 640 } });
  await signIn(page, app, 'ada');
  for (const path of ['/', '/audit', '/settings/users', '/settings/tokens']) {
    await page.goto(app.url + path);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflow <= 0, `${path} scrolls sideways by ${overflow}px at 320px`);
  }
  await page.goto(app.url + '/');
  await screenshot(page, 'home-320');
});

test('admin pages render: users, tokens (shown once), audit', async () => {
  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.goto(app.url + '/settings/users');
  await page.getByLabel('Name', { exact: true }).fill('Bad Name');
  await page.getByLabel('Initial password').fill('short');
  await page.getByRole('button', { name: /Add user/ }).click();
  await page.waitForSelector('#new-name-error');
  assert.match(await page.locator('#new-name-error').innerText(), /lowercase letters/);
  assert.match(await page.locator('#new-password-error').innerText(), /at least 12/);
  await screenshot(page, 'users-invalid');
  await page.goto(app.url + '/settings/tokens');
  await page.getByLabel('Label').fill('browser test');
  await page.getByRole('button', { name: 'Create token' }).click();
  const token = await page.locator('#created-token').innerText();
  assert.match(token, /^cdc_/);
  await screenshot(page, 'tokens-created');
  await page.goto(app.url + '/settings/tokens');
  assert.equal(await page.locator('#created-token').count(), 0, 'the token is shown only once');
  await page.goto(app.url + '/audit');
  assert.match(await page.locator('table').innerText(), /token\.create/);
  await screenshot(page, 'audit');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});
