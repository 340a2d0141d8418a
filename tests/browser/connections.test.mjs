import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api } from './harness.mjs';

let app, browser;
before(async () => {
  app = await startApp();
  createUser(app, 'ada', 'admin');
  browser = await launchBrowser();
});
after(async () => { await browser?.close(); await app?.stop(); });

function stackEnv(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run under scripts/test (it exports scripts/stack env)`);
  return v;
}

test('an admin adds a MinIO connection, sees inline errors first, then tests it with progress and per-check results', async () => {
  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.getByRole('link', { name: 'Connections' }).click();
  await page.getByRole('link', { name: 'New connection' }).click();
  await page.getByLabel('Provider', { exact: true }).selectOption('MINIO');
  await page.waitForURL(/provider=MINIO/);
  await page.getByLabel('Name').fill('stack minio');
  await page.getByLabel('Bucket').fill('Bad_Bucket');
  await page.getByLabel('Endpoint').fill('http://user:pw@127.0.0.1:1');
  await page.getByRole('button', { name: 'Save connection' }).click();
  await page.waitForSelector('[id="f-settings.bucket-error"]');
  assert.match(await page.locator('[id="f-settings.bucket-error"]').innerText(), /lowercase letters/);
  assert.match(await page.locator('[id="f-settings.endpoint-error"]').innerText(), /credentials belong in the secret fields/);
  assert.match(await page.locator('[id="f-secrets.access_key_id-error"]').innerText(), /required/);
  assert.equal(await page.getByLabel('Name').inputValue(), 'stack minio', 'what was typed stays');
  await screenshot(page, 'connection-invalid');

  await page.getByLabel('Bucket').fill(stackEnv('S3_BUCKET'));
  await page.getByLabel('Endpoint').fill(stackEnv('S3_ENDPOINT'));
  await page.getByLabel('Access key ID').fill(stackEnv('S3_ACCESS_KEY'));
  await page.getByLabel('Secret access key').fill(stackEnv('S3_SECRET_KEY'));
  await page.getByRole('button', { name: 'Save connection' }).click();
  await page.waitForSelector('h1:has-text("stack minio")');
  assert.match(await page.locator('main').innerText(), /isolated local fixtures/, 'plain http is labelled');
  const html = await page.content();
  assert.ok(!html.includes(stackEnv('S3_SECRET_KEY')), 'the secret is never rendered');

  await page.getByRole('button', { name: 'Test connection' }).click();
  await page.waitForSelector('#test-result .state');
  const result = await page.locator('#test-result').innerText();
  assert.match(result, /All checks passed/);
  for (const check of ['bucket', 'write probe', 'read back', 'delete probe']) assert.match(result, new RegExp(check));
  await screenshot(page, 'connection-tested');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});

test('a database connection asks for its TLS mode: verify-full, verify-ca or disable, never require', async () => {
  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.goto(app.url + '/connections/new?provider=POSTGRESQL');
  const tls = page.getByLabel('TLS', { exact: true });
  assert.deepEqual(await tls.locator('option').evaluateAll((os) => os.map((o) => o.value)), ['', 'verify-full', 'verify-ca', 'disable']);
  await page.getByLabel('Name').fill('tls choice');
  await page.getByLabel('Host').fill(stackEnv('PG_HOST'));
  await page.getByLabel('Port').fill(stackEnv('PG_PORT'));
  await page.getByLabel('Database').fill(stackEnv('PG_SOURCE_DB'));
  await page.getByLabel('User').fill(stackEnv('PG_USER'));
  await page.getByLabel('Password').fill(stackEnv('PG_PASSWORD'));
  await page.getByRole('button', { name: 'Save connection' }).click();
  await page.waitForSelector('[id="f-settings.tls_mode-error"]');
  assert.match(await page.locator('[id="f-settings.tls_mode-error"]').innerText(), /choose verify-full \(with ca_certificate\) or verify-ca; disable only for an isolated local fixture/);
  await page.getByLabel('TLS', { exact: true }).selectOption('verify-full');
  await page.getByLabel('Password').fill(stackEnv('PG_PASSWORD'));
  await page.getByRole('button', { name: 'Save connection' }).click();
  await page.waitForSelector('[id="f-settings.ca_certificate-error"]');
  assert.match(await page.locator('[id="f-settings.ca_certificate-error"]').innerText(), /required with tls_mode verify-full/);
  await screenshot(page, 'connection-tls-mode');
  await page.getByLabel('TLS', { exact: true }).selectOption('disable');
  await page.getByLabel('Password').fill(stackEnv('PG_PASSWORD'));
  await page.getByRole('button', { name: 'Save connection' }).click();
  await page.waitForSelector('h1:has-text("tls choice")');
  assert.match(await page.locator('main').innerText(), /TLS is disabled/);
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});

test('a viewer sees connections but no edit, test or delete controls', async () => {
  createUser(app, 'vic', 'viewer');
  const page = await browser.newPage();
  await signIn(page, app, 'vic');
  await page.goto(app.url + '/connections');
  assert.equal(await page.getByRole('link', { name: 'New connection' }).count(), 0);
  await page.getByRole('link', { name: 'stack minio' }).click();
  assert.equal(await page.getByRole('button', { name: 'Test connection' }).count(), 0);
  assert.equal(await page.getByRole('button', { name: /Delete/ }).count(), 0);
  const res = await page.goto(app.url + '/connections/new');
  assert.equal(res.status(), 403);
  assert.match(await page.locator('main').innerText(), /your role \(viewer\) cannot manage connections/);
});

test('deleting a connection asks first on a page that says what will be lost', async () => {
  const page = await browser.newPage();
  await signIn(page, app, 'ada');
  await page.goto(app.url + '/connections');
  await page.getByRole('link', { name: 'stack minio' }).click();
  await page.getByRole('link', { name: /Delete stack minio/ }).click();
  assert.match(await page.locator('main').innerText(), /encrypted credentials/);
  await screenshot(page, 'connection-delete-confirm');
  await page.getByRole('link', { name: 'Keep it' }).click();
  await page.getByRole('link', { name: /Delete stack minio/ }).click();
  await page.getByRole('button', { name: 'Delete stack minio' }).click();
  await page.waitForURL(app.url + '/connections');
  assert.match(await page.locator('main').innerText(), /Connection stack minio deleted/);
});

function psql(sql) {
  const env = process.env;
  const out = spawnSync('psql', ['-h', stackEnv('PG_HOST'), '-p', stackEnv('PG_PORT'), '-U', stackEnv('PG_USER'), '-d', stackEnv('PG_SOURCE_DB'), '-tA', '-v', 'ON_ERROR_STOP=1', '-c', sql], { env: { ...env, PGPASSWORD: stackEnv('PG_PASSWORD') }, encoding: 'utf8' });
  if (out.status !== 0) throw new Error(out.stderr);
  return out.stdout.trim();
}

test('an orphan replication slot is listed on its source and dropped only after its name is typed', async () => {
  const slot = `orphan_${process.pid}`;
  psql(`SELECT pg_create_logical_replication_slot('${slot}', 'pgoutput')`);
  try {
    const token = createToken(app, 'ada');
    const [status, conn] = await api(app, token, 'POST', '/api/v1/connections', { name: `pg slots ${process.pid}`, provider: 'POSTGRESQL', capabilities: ['SOURCE'],
      settings: { host: stackEnv('PG_HOST'), port: Number(stackEnv('PG_PORT')), database: stackEnv('PG_SOURCE_DB'), user: stackEnv('PG_USER'), tls_mode: 'disable' }, secrets: { password: stackEnv('PG_PASSWORD') } });
    assert.equal(status, 201, JSON.stringify(conn));
    const page = await browser.newPage();
    const errors = watchConsole(page);
    await signIn(page, app, 'ada');
    await page.goto(`${app.url}/connections/${conn.id}`);
    const row = page.locator(`#slots tr:has-text("${slot}")`);
    await row.waitFor({ timeout: 30_000 });
    assert.match(await row.innerText(), /no pipeline \(orphan\)/);
    assert.match(await row.innerText(), /idle/);
    await row.getByLabel(`Type ${slot} to drop it`).fill('wrong');
    await row.getByRole('button', { name: 'Drop slot' }).click();
    await page.locator(`[id="drop-${slot}-error"]`).waitFor();
    assert.match(await page.locator(`[id="drop-${slot}-error"]`).innerText(), /type the slot name/);
    assert.equal(psql(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = '${slot}'`), '1', 'a wrong confirmation drops nothing');
    await screenshot(page, 'connection-slots');
    await page.locator(`#slots tr:has-text("${slot}")`).getByLabel(`Type ${slot} to drop it`).fill(slot);
    await page.locator(`#slots tr:has-text("${slot}")`).getByRole('button', { name: 'Drop slot' }).click();
    await page.locator('#slots .flash-ok').waitFor();
    assert.match(await page.locator('#slots .flash-ok').innerText(), new RegExp(`${slot} dropped`));
    assert.equal(await page.locator(`#slots tr:has-text("${slot}")`).count(), 0);
    assert.equal(psql(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = '${slot}'`), '0');
    const [, audit] = await api(app, token, 'GET', '/api/v1/audit?action=slot.drop');
    assert.ok(audit.items.some((e) => e.target_id === slot && e.outcome === 'success'), 'the drop is audited');
    assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
  } finally {
    try { psql(`SELECT pg_drop_replication_slot('${slot}') FROM pg_replication_slots WHERE slot_name = '${slot}'`); } catch {}
  }
});

test('changing a connection\'s host without re-entering its password shows the inline error; with it, the connection saves and tests green', async () => {
  const token = createToken(app, 'ada');
  const name = `rebind ${process.pid}`;
  const [status, conn] = await api(app, token, 'POST', '/api/v1/connections', { name, provider: 'POSTGRESQL', capabilities: ['SOURCE'],
    settings: { host: stackEnv('PG_HOST'), port: Number(stackEnv('PG_PORT')), database: stackEnv('PG_SOURCE_DB'), user: stackEnv('PG_USER'), tls_mode: 'disable' },
    secrets: { password: stackEnv('PG_PASSWORD') } });
  assert.equal(status, 201, JSON.stringify(conn));
  // Another name for the same server: the password must travel with the move.
  const host = stackEnv('PG_HOST') === 'localhost' ? '127.0.0.1' : 'localhost';
  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.goto(`${app.url}/connections/${conn.id}`);
  await page.getByRole('link', { name: 'Edit' }).click();
  await page.getByLabel('Host').fill(host);
  await page.getByRole('button', { name: 'Save connection' }).click();
  const error = page.locator('[id="f-secrets.password-error"]');
  await error.waitFor();
  assert.match(await error.innerText(), /password must be given again when the host changes/);
  assert.equal(await page.getByLabel('Host').inputValue(), host, 'what was typed stays');
  assert.equal(await page.getByLabel(/^Password/).getAttribute('aria-describedby'), 'f-secrets.password-error');
  await screenshot(page, 'connection-rebind-refused');
  const [, still] = await api(app, token, 'GET', `/api/v1/connections/${conn.id}`);
  assert.equal(still.settings.host, stackEnv('PG_HOST'), 'nothing was saved');

  await page.getByLabel(/^Password/).fill(stackEnv('PG_PASSWORD'));
  await page.getByRole('button', { name: 'Save connection' }).click();
  await page.waitForSelector(`h1:has-text("${name}")`);
  assert.match(await page.locator('main').innerText(), new RegExp(`Connection ${name} updated`));
  await page.getByRole('button', { name: 'Test connection' }).click();
  await page.waitForSelector('#test-result .state');
  assert.match(await page.locator('#test-result').innerText(), /All checks passed/);
  await screenshot(page, 'connection-rebind-saved');
  const [, saved] = await api(app, token, 'GET', `/api/v1/connections/${conn.id}`);
  assert.equal(saved.settings.host, host);
  const [, audit] = await api(app, token, 'GET', '/api/v1/audit?action=connection.update');
  assert.deepEqual(audit.items[0].summary.rebound, [{ field: 'password', settings: ['host'] }], JSON.stringify(audit.items[0]));
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});
