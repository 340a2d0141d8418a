// MySQL from the pages, against the stack's real MySQL 9 server: a source connection with
// verify-full TLS (the stack's CA pasted into the form) tested green, a pipeline over a table
// chosen from discovery running, then a MySQL destination connection and a database delivery
// into it whose rows arrive.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api, htmxReady, pointProviderAt, releaseProvider } from './harness.mjs';

const env = process.env;
const pid = process.pid;
const table = `bwm_${pid}_orders`;
const keyless = `bwm_${pid}_notes`;
const prefix = `bwm-${pid}`;
const destTable = `bwm_${pid}_${table}`;
// A capture user of this run's own: the grants Debezium documents, plus the signal table that
// ClueCDC creates on pipeline creation (MySQL checks CREATE for CREATE TABLE IF NOT EXISTS even
// when the table exists, so a DBA creating it beforehand is not enough).
const captureUser = `bwm_${pid}`;
const capturePassword = `bwm_${pid}_fixture_pw`;
let app, browser, token;

/** SQL as the stack's MySQL root user over TLS verified against the stack's CA (bookworm's
 * mariadb client); its output, trimmed. */
function mysql(db, sql) {
  const out = spawnSync('mariadb', ['--no-defaults', '-h', env.MYSQL_HOST, '-P', env.MYSQL_PORT, '-u', env.MYSQL_ROOT_USER, `-p${env.MYSQL_ROOT_PASSWORD}`,
    '--ssl', `--ssl-ca=${env.TLS_CA_FILE}`, '--ssl-verify-server-cert', '-N', '-B', '-e', sql, db], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(out.stderr);
  return out.stdout.trim();
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h', CLUECDC_MONITOR_INTERVAL: '2s', CLUECDC_OFFSETS_INTERVAL: '5s' } });
  createUser(app, 'ada', 'admin');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
  mysql(env.MYSQL_DB, `DROP USER IF EXISTS '${captureUser}'@'%'; CREATE USER '${captureUser}'@'%' IDENTIFIED BY '${capturePassword}';
    GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '${captureUser}'@'%';
    GRANT CREATE, INSERT, UPDATE, DELETE ON \`${env.MYSQL_DB}\`.cluecdc_signal TO '${captureUser}'@'%';`);
  mysql(env.MYSQL_DB, `DROP TABLE IF EXISTS ${table}, ${keyless}; CREATE TABLE ${table} (id INT PRIMARY KEY, total DECIMAL(10,2) NOT NULL, note VARCHAR(40)); CREATE TABLE ${keyless} (body TEXT); INSERT INTO ${table} VALUES (1, 9.50, 'first'), (2, 12.00, NULL);`);
  // Clusters come from the API (their pages are covered elsewhere).
  const [, connect] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: env.CONNECT_URL });
  await pointProviderAt(app, connect);
  await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'stack kafka', bootstrap_servers: env.KAFKA_BOOTSTRAP });
});

after(async () => {
  await browser?.close();
  await app?.stop();
  for (const name of [`cluecdc-capture-${prefix}`, 'cluecdc-deliver-orders-to-mysql']) {
    await fetch(`${env.CONNECT_URL}/connectors/${name}`, { method: 'DELETE' }).catch(() => {});
  }
  try { mysql(env.MYSQL_DB, `DROP TABLE IF EXISTS ${table}, ${keyless}; DROP USER IF EXISTS '${captureUser}'@'%'`); } catch (e) { console.error(e.message); }
  try { mysql(env.MYSQL_DEST_DB, `DROP TABLE IF EXISTS ${destTable}`); } catch (e) { console.error(e.message); }
  releaseProvider();
});

/** Connections → New connection → MySQL, filled in with verify-full and the CA pasted; saved,
 * then tested: every check green. */
async function createMysqlConnection(page, { name, capability, database, user, password }) {
  await page.getByRole('link', { name: 'Connections' }).click();
  await page.getByRole('link', { name: 'New connection' }).click();
  await page.getByLabel('Provider', { exact: true }).selectOption('MYSQL');
  await page.waitForURL(/provider=MYSQL/);
  await htmxReady(page);
  await page.getByLabel('Name').fill(name);
  for (const c of ['Source', 'Destination']) {
    const box = page.getByRole('checkbox', { name: new RegExp(`${c} \\(`) });
    if (c === capability) await box.check(); else await box.uncheck();
  }
  await page.getByLabel('Host').fill(env.MYSQL_HOST);
  await page.getByLabel('Port').fill(env.MYSQL_PORT);
  await page.getByLabel('Database').fill(database);
  await page.getByLabel('User').fill(user);
  await page.getByLabel('TLS', { exact: true }).selectOption('verify-full');
  await page.getByLabel('CA certificate (PEM)').fill(readFileSync(env.TLS_CA_FILE, 'utf8'));
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Save connection' }).click();
  await page.waitForSelector(`h1:has-text("${name}")`);
  assert.ok(!(await page.content()).includes(password), 'the password is never rendered');
  await page.getByRole('button', { name: 'Test connection' }).click();
  await page.waitForSelector('#test-result .state', { timeout: 30_000 });
  const result = await page.locator('#test-result').innerText();
  assert.match(result, /All checks passed/, result);
  return { id: page.url().match(/\/connections\/(con_[0-9a-f]+)/)[1], result };
}

test('an admin creates a MySQL source with verify-full TLS from the pages, a pipeline over a discovered table, and a delivery into MySQL', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');

  const source = await createMysqlConnection(page, { name: 'shop mysql', capability: 'Source', database: env.MYSQL_DB, user: captureUser, password: capturePassword });
  for (const check of ['reachable', 'version', 'binlog', 'binlog format', 'row image', 'gtid', 'binlog retention', 'server id', 'privileges']) {
    assert.match(source.result, new RegExp(`^${check}:`, 'm'), `the ${check} check is shown`);
  }
  assert.match(source.result, /version: 9\./);
  await screenshot(page, 'mysql-connection-tested');

  // The wizard: discovery lists the MySQL tables with their keys.
  await page.getByRole('link', { name: 'Pipelines' }).click();
  await page.getByRole('link', { name: 'Create pipeline' }).click();
  await page.waitForURL(/\/pipelines\/new/);
  await htmxReady(page);
  await page.getByLabel('1. Source connection').selectOption(source.id);
  await page.getByLabel(`${env.MYSQL_DB}.${table}`).waitFor({ timeout: 30_000 });
  assert.match(await page.locator(`tr:has-text("${env.MYSQL_DB}.${table}")`).innerText(), /\bid\b/, 'the primary key is shown');
  await page.getByLabel(`${env.MYSQL_DB}.${table}`).check();
  await page.getByLabel('Pipeline name').fill('shop orders');
  await page.getByLabel('Topic prefix').fill(prefix);
  await screenshot(page, 'mysql-pipeline-tables');
  await page.getByRole('button', { name: '4. Review' }).click();
  await page.getByText('plugin accepts this config').waitFor({ timeout: 30_000 });
  const review = await page.locator('main').innerText();
  assert.match(review, /io\.debezium\.connector\.mysql\.MySqlConnector/);
  assert.match(review, new RegExp(`${prefix}\\.${env.MYSQL_DB}\\.${table}`), 'the topic to create is listed');
  assert.match(review, /\$\{cluecdc:sec_[0-9a-f]+:password\}/, 'the password appears only as a reference');
  assert.match(review, /\$\{cluecdc:sec_[0-9a-f]+:ca_truststore_file\}/, 'the CA reaches the worker as a truststore reference');
  assert.ok(!review.includes(env.MYSQL_PASSWORD) && !review.includes('BEGIN CERTIFICATE'));
  await screenshot(page, 'mysql-pipeline-review');
  await page.getByRole('button', { name: '5. Create pipeline' }).click();
  await page.waitForURL(/\/pipelines\/pl_/).catch(async (e) => {
    await screenshot(page, 'mysql-pipeline-refused');
    throw new Error(`${e.message}\nthe page says: ${await page.locator('main').innerText()}`);
  });
  const pipelineId = page.url().match(/\/pipelines\/(pl_[0-9a-f]+)/)[1];
  // The status section refreshes itself: no reload.
  await page.locator('#pipeline-status .state-running').first().waitFor({ timeout: 90_000 });
  await page.locator('#pipeline-status dt:has-text("Connector has reached") + dd:has-text("binlog.")').waitFor({ timeout: 60_000 });
  assert.match(await page.locator('#pipeline-status').innerText(), /RUNNING/);
  await screenshot(page, 'mysql-pipeline-running');

  // MySQL as the destination: a connection for the destination user, then a delivery.
  const dest = await createMysqlConnection(page, { name: 'mysql replica', capability: 'Destination', database: env.MYSQL_DEST_DB, user: env.MYSQL_DEST_USER, password: env.MYSQL_DEST_PASSWORD });
  assert.match(dest.result, /create and alter tables: may create, alter and drop tables/);
  await page.getByRole('link', { name: 'Deliveries', exact: true }).click();
  await page.getByRole('link', { name: 'Create delivery' }).click();
  await page.waitForURL(/\/deliveries\/new/);
  await htmxReady(page);
  await page.getByLabel('1. Pipeline').selectOption(pipelineId);
  await page.waitForURL(/pipeline_id=pl_/);
  await htmxReady(page);
  await page.getByLabel('2. Destination').selectOption(dest.id);
  await page.getByLabel('Table name format').waitFor();
  await page.getByLabel('Delivery name').fill('orders to mysql');
  await page.getByLabel('Table name format').fill(`bwm_${pid}_\${source.table}`);
  await page.getByRole('button', { name: 'Review', exact: true }).click();
  await page.getByText('Ready: the destination passed its test').waitFor({ timeout: 60_000 });
  const preview = await page.locator('main').innerText();
  assert.match(preview, /sslMode=VERIFY_IDENTITY/);
  assert.doesNotMatch(preview, /allowPublicKeyRetrieval/i);
  await screenshot(page, 'mysql-delivery-review');
  await page.getByRole('button', { name: 'Create delivery' }).click();
  await page.waitForURL(/\/deliveries\/dl_[0-9a-f]+$/);
  await page.locator('#delivery-status .state-running').first().waitFor({ timeout: 90_000 });
  let rows = '';
  for (let i = 0; i < 120 && rows !== '1\t9.50\tfirst\n2\t12.00\tNULL'; i++) {
    await sleep(500);
    try { rows = mysql(env.MYSQL_DEST_DB, `SELECT id, total, note FROM ${destTable} ORDER BY id`); } catch { rows = ''; }
  }
  assert.equal(rows, '1\t9.50\tfirst\n2\t12.00\tNULL', 'the snapshot rows arrived in MySQL');
  await page.reload();
  await screenshot(page, 'mysql-delivery-running');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});
