// Single sign-on through the stack's real Dex, in a real browser: Dex's own login form, the role
// from the groups claim (each user sees exactly its role's controls), a user in no mapped group
// refused, a group change taking effect at the next sign-in (audited), and sign-out.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, X509Certificate } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, api, repoRoot } from './harness.mjs';

const env = process.env;
// The last port of the range Dex has redirect URIs for (the integration tests use the first ones).
const port = Number(env.DEX_RP_PORTS.split('-')[1]);

/** Writes milo's groups at Dex and brings Dex up with them (`up` restarts it when they changed). */
function setMiloGroups(groups) {
  mkdirSync(env.DEX_GROUPS_DIR, { recursive: true });
  writeFileSync(join(env.DEX_GROUPS_DIR, 'milo'), groups.join('\n') + '\n');
  const out = spawnSync(join(repoRoot, 'scripts', 'stack'), ['up', 'dex'], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`scripts/stack up dex: ${out.stderr}`);
}

/** Chromium trusts exactly the stack's server key (Dex's certificate), by its SPKI hash. */
function stackServerSpki() {
  const cert = new X509Certificate(readFileSync(join(env.STACK_DIR, 'tls', 'server.pem')));
  return createHash('sha256').update(cert.publicKey.export({ type: 'spki', format: 'der' })).digest('base64');
}

let app, browser, token;
before(async () => {
  setMiloGroups(['cluecdc-viewers']);
  app = await startApp({
    env: {
      CLUECDC_LISTEN: `127.0.0.1:${port}`,
      CLUECDC_PUBLIC_URL: `http://127.0.0.1:${port}`,
      CLUECDC_OIDC_ISSUER: env.DEX_ISSUER,
      CLUECDC_OIDC_CLIENT_ID: env.DEX_CLIENT_ID,
      CLUECDC_OIDC_CLIENT_SECRET: env.DEX_CLIENT_SECRET,
      CLUECDC_OIDC_CA_FILE: env.TLS_CA_FILE,
      CLUECDC_OIDC_SCOPES: 'openid profile email groups',
      CLUECDC_OIDC_ADMIN_GROUPS: 'cluecdc-admins',
      CLUECDC_OIDC_OPERATOR_GROUPS: 'cluecdc-operators',
      CLUECDC_OIDC_VIEWER_GROUPS: 'cluecdc-viewers',
      CLUECDC_OIDC_NAME: 'Dex',
    },
  });
  createUser(app, 'ada', 'admin');
  token = createToken(app, 'ada');
  browser = await launchBrowser({ args: [`--ignore-certificate-errors-spki-list=${stackServerSpki()}`] });
});
after(async () => {
  await browser?.close();
  await app?.stop();
  setMiloGroups(['cluecdc-viewers']);
});

/** Signs in through Dex's own login form; resolves on the page ClueCDC lands on. */
async function ssoSignIn(page, user) {
  await page.goto(app.url + '/login');
  await page.getByRole('link', { name: 'Sign in with Dex' }).click();
  await page.waitForURL((u) => u.href.startsWith(env.DEX_ISSUER));
  await page.locator('#login').fill(`${user}@example.com`);
  await page.locator('#password').fill(env.DEX_USER_PASSWORD);
  await Promise.all([
    page.waitForURL((u) => u.href.startsWith(app.url) && !u.pathname.startsWith('/login/oidc')),
    page.locator('button[type=submit]').click(),
  ]);
}

/** What a signed-in person can see of their role: the role label and the role-gated controls. */
async function controls(page) {
  const nav = page.getByRole('navigation', { name: 'Main' });
  const role = (await page.locator('.whoami .role').innerText()).trim();
  const settings = await nav.getByRole('link', { name: 'Settings' }).count();
  await page.goto(app.url + '/connections');
  const newConnection = await page.getByRole('link', { name: 'New connection' }).count();
  await page.goto(app.url + '/pipelines');
  const createPipeline = await page.getByRole('link', { name: 'Create pipeline' }).count();
  return { role, settings, newConnection, createPipeline };
}

async function signOut(page) {
  await Promise.all([page.waitForURL(/\/login\?signed_out=1$/), page.getByRole('button', { name: 'Sign out' }).click()]);
}

test('the sign-in page offers "Sign in with Dex"; an admin-group user and a viewer-group user each see exactly their role\'s controls, and signing out ends the session', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const errors = watchConsole(page);
  await page.goto(app.url + '/login');
  assert.equal(await page.getByRole('link', { name: 'Sign in with Dex' }).count(), 1);
  assert.equal(await page.getByLabel('Name').count(), 1, 'the local password form stays (break-glass)');
  await screenshot(page, 'oidc-sign-in');

  await ssoSignIn(page, 'alice');
  assert.equal(new URL(page.url()).pathname, '/');
  assert.match(await page.locator('.whoami').innerText(), /alice \(admin\)/);
  assert.deepEqual(await controls(page), { role: '(admin)', settings: 1, newConnection: 1, createPipeline: 1 });
  await signOut(page);
  assert.match(await page.getByRole('status').innerText(), /You are signed out/);
  // The session is over: a page sends the browser to sign in again.
  await page.goto(app.url + '/audit');
  assert.match(page.url(), /\/login\?next=%2Faudit$/);

  await ssoSignIn(page, 'victor');
  assert.deepEqual(await controls(page), { role: '(viewer)', settings: 0, newConnection: 0, createPipeline: 0 });
  assert.deepEqual(errors, []);
  // A viewer typing an admin's address is refused (the browser notes the 403 in its console).
  const settingsPage = await page.goto(app.url + '/settings/users');
  assert.equal(settingsPage.status(), 403);
  await page.goto(app.url + '/');
  await signOut(page);
  await context.close();
});

test('a user in no mapped group is refused with a page that says why, and is not signed in', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(app.url + '/login');
  await page.getByRole('link', { name: 'Sign in with Dex' }).click();
  await page.waitForURL((u) => u.href.startsWith(env.DEX_ISSUER));
  await page.locator('#login').fill('nina@example.com');
  await page.locator('#password').fill(env.DEX_USER_PASSWORD);
  const [answer] = await Promise.all([
    page.waitForResponse((r) => r.url().startsWith(app.url + '/login/oidc/callback')),
    page.locator('button[type=submit]').click(),
  ]);
  assert.equal(answer.status(), 403);
  const alert = page.getByRole('alert');
  assert.match(await alert.innerText(), /Sign-in with Dex failed: your account is in no group that ClueCDC maps to a role \(groups: staff\); ask an administrator/);
  await screenshot(page, 'oidc-refused');
  await page.goto(app.url + '/');
  assert.match(page.url(), /\/login\?next=%2F$/);
  await context.close();
});

test('a changed group membership changes the role at the next sign-in, and the change is in the audit trail', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  await ssoSignIn(page, 'milo');
  assert.match(await page.locator('.whoami').innerText(), /milo \(viewer\)/);
  await signOut(page);

  setMiloGroups(['cluecdc-admins']);
  await ssoSignIn(page, 'milo');
  assert.match(await page.locator('.whoami').innerText(), /milo \(admin\)/);
  await page.goto(app.url + '/audit?action=user.role_from_groups');
  const row = page.locator('tbody tr', { hasText: 'user.role_from_groups' });
  assert.equal(await row.count(), 1);
  const [status, rows] = await api(app, token, 'GET', '/api/v1/audit?action=user.role_from_groups');
  assert.equal(status, 200);
  const change = rows.items.find((r) => r.action === 'user.role_from_groups');
  assert.equal(change.summary.from, 'viewer');
  assert.equal(change.summary.to, 'admin');
  assert.deepEqual(change.summary.groups, ['cluecdc-admins']);
  // The users page tells single sign-on accounts and where their role came from.
  await page.goto(app.url + '/settings/users');
  const milo = page.getByRole('row', { name: /^milo single sign-on/ });
  assert.match(await milo.innerText(), /single sign-on/);
  assert.match(await milo.innerText(), /from the provider's groups at the last sign-in/);
  await screenshot(page, 'oidc-users');
  await context.close();
});
