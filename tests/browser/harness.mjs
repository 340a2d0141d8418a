// Browser test harness: starts the real cluecdc binary on a free port with a temporary data
// directory and drives Debian's Chromium through playwright-core (Playwright's own browser
// download cannot work on these machines).
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '..', '..');
export const screenshotDir = join(repoRoot, 'artifacts', 'screenshots');

export function binaryPath() {
  const bin = process.env.CLUECDC_BIN;
  if (!bin) throw new Error('CLUECDC_BIN is not set: point it at the built cluecdc binary (the test command does this)');
  return bin;
}

/** Starts `cluecdc serve` and resolves once it prints its URL. */
export async function startApp({ env = {}, args = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'cluecdc-browser-'));
  const logPath = join(dir, 'cluecdc.log');
  const log = openSync(logPath, 'w');
  // A fixed address only where a test needs one (a redirect URI registered at Dex).
  const listen = env.CLUECDC_LISTEN ?? '127.0.0.1:0';
  const child = spawn(binaryPath(), ['serve', '--listen', listen, '--data-dir', join(dir, 'data'), ...args], {
    cwd: dir,
    env: { ...process.env, CLUECDC_LOG: 'info', ...env },
    stdio: ['pipe', 'pipe', log],
  });
  const url = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`no URL within 60 s; log:\n${readFileSync(logPath, 'utf8')}`)), 60_000);
    let buf = '';
    child.stdout.on('data', (chunk) => {
      buf += chunk;
      const m = buf.match(/ClueCDC listening on (\S+)/);
      if (m) { clearTimeout(timer); ok(m[1]); }
    });
    child.on('exit', (code) => { clearTimeout(timer); fail(new Error(`exited ${code}; log:\n${readFileSync(logPath, 'utf8')}`)); });
  });
  return {
    url, dir, child, logPath,
    log: () => readFileSync(logPath, 'utf8'),
    stop: () => new Promise((ok) => { child.once('exit', ok); child.kill('SIGTERM'); }),
  };
}

/** Launches headless Chromium with the flags this closed network needs. */
export async function launchBrowser({ args = [] } = {}) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic', ...args],
  });
}

/** Waits until htmx has processed the page: an element can be in the DOM, and be acted on,
 * before its hx- attributes listen. htmx loads deferred and binds on DOMContentLoaded, which
 * fires after the deferred script has run (so `window.htmx` alone is not enough); it marks each
 * element it has processed with an `initHash` in its internal data, which is what is waited for,
 * on every element with hx- attributes, and for no request in flight. */
export async function htmxReady(page) {
  await page.waitForFunction(() => {
    if (window.htmx === undefined || !document.body || document.body.classList.contains('htmx-request')) return false;
    const bound = [...document.querySelectorAll('[hx-get],[hx-post],[hx-put],[hx-patch],[hx-delete]')];
    return bound.every((e) => e['htmx-internal-data']?.initHash);
  });
}

/** Collects console errors (a CSP violation shows up here) for a page. A 422 is how a form
 * answers with inline field errors, so the browser's note about it is not an error here. */
export function watchConsole(page) {
  const errors = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !/status of 422/.test(msg.text())) errors.push(msg.text());
  });
  page.on('pageerror', (err) => errors.push(String(err)));
  return errors;
}

export async function screenshot(page, name) {
  mkdirSync(screenshotDir, { recursive: true });
  const path = join(screenshotDir, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

export const PASSWORD = 'correct horse battery staple';

/** `cluecdc user create` against the app's data directory, password on standard input. */
export function createUser(app, name, role) {
  const out = spawnSync(binaryPath(), ['user', 'create', '--name', name, '--role', role, '--data-dir', join(app.dir, 'data')], {
    input: PASSWORD + '\n', encoding: 'utf8',
  });
  if (out.status !== 0) throw new Error(`user create failed: ${out.stderr}`);
}

/** Signs in through the real form. */
export async function signIn(page, app, name) {
  await page.goto(app.url + '/login');
  await page.getByLabel('Name').fill(name);
  await page.getByLabel('Password').fill(PASSWORD);
  await Promise.all([page.waitForURL(app.url + '/'), page.getByRole('button', { name: 'Sign in' }).click()]);
}

/** `cluecdc token create` for a user: the bearer token for API calls from a test. */
export function createToken(app, user) {
  const out = spawnSync(binaryPath(), ['token', 'create', '--user', user, '--data-dir', join(app.dir, 'data')], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`token create failed: ${out.stderr}`);
  return out.stdout.trim();
}

/** Calls ClueCDC's JSON API; returns [status, body]. */
export async function api(app, token, method, path, body) {
  const res = await fetch(app.url + path, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = text; }
  return [res.status, json];
}

/** Runs SQL with psql as the stack's connector user on database `db`; its output, trimmed. */
export function psql(db, sql) {
  const env = process.env;
  const out = spawnSync('psql', ['-h', env.PG_HOST, '-p', env.PG_PORT, '-U', env.PG_USER, '-d', db, '-tA', '-v', 'ON_ERROR_STOP=1', '-c', sql], { env: { ...env, PGPASSWORD: env.PG_PASSWORD }, encoding: 'utf8' });
  if (out.status !== 0) throw new Error(out.stderr);
  return out.stdout.trim();
}

/**
 * Removes what a capture test leaves in the stack's source database: the slot once the deleted
 * connector's task has let go of it (a slot left behind keeps WAL on the shared server for
 * good), the publication of the same name, and the schema.
 */
export async function dropCaptureFixture(slot, schema) {
  const source = (sql) => psql(process.env.PG_SOURCE_DB, sql);
  for (let i = 0; i < 60; i++) {
    try {
      source(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '${slot}' AND NOT active`);
      if (source(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = '${slot}'`) === '0') break;
    } catch { /* retried */ }
    await new Promise((r) => setTimeout(r, 500));
  }
  try { source(`DROP PUBLICATION IF EXISTS ${slot}; DROP SCHEMA IF EXISTS ${schema} CASCADE;`); } catch (e) { console.error(e.message); }
}

/** The stack's one config-provider file points Connect at one ClueCDC at a time. Every test file
 * that points it at its own takes the lock file the integration tests' `provider_lock` and the
 * API contract take (`<file>.lock`, naming its holder's pid; a dead holder's lock is taken over)
 * and keeps it until `releaseProvider()`, so nothing run beside it repoints Connect mid-test
 * (the contract's fuzzing once saw a browser test's ClueCDC answer for its secrets). */
const providerLock = () => `${process.env.CLUECDC_PROVIDER_FILE}.lock`;
let providerHeld = false;
export async function takeProviderLock() {
  if (providerHeld) return;
  const deadline = Date.now() + 10 * 60_000;
  while (Date.now() < deadline) {
    try {
      const fd = openSync(providerLock(), 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      providerHeld = true;
      return;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
      const holder = (() => { try { return readFileSync(providerLock(), 'utf8').trim(); } catch { return ''; } })();
      if (holder && !existsSync(`/proc/${holder}`)) rmSync(providerLock(), { force: true });
      else await new Promise((r) => setTimeout(r, 250));
    }
  }
  throw new Error(`${providerLock()} held for 10 minutes`);
}

/** Points the stack's Connect config provider at `app`, whose Connect cluster record `connect` is
 * (its provider token), under the lock above. */
export async function pointProviderAt(app, connect) {
  await takeProviderLock();
  const file = process.env.CLUECDC_PROVIDER_FILE;
  writeFileSync(`${file}.tmp`, `url=${app.url}\ntoken=${connect.provider_token}\n`);
  renameSync(`${file}.tmp`, file);
}

export function releaseProvider() {
  if (!providerHeld) return;
  try {
    if (readFileSync(providerLock(), 'utf8').trim() === String(process.pid)) rmSync(providerLock(), { force: true });
  } catch { /* not there */ }
  providerHeld = false;
}
