import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api } from './harness.mjs';

let app, browser, token, firstToken;
const TOKEN_LINE = /^config\.providers\.cluecdc\.param\.token=(cdcp_[A-Za-z0-9_-]{43})$/m;
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
  assert.match(shown, TOKEN_LINE, 'the whole base64url alphabet (- and _ included)');
  firstToken = shown.match(TOKEN_LINE)[1];
  // Beside the token, the jar the workers need (the test command's stack env sets
  // CLUECDC_PROVIDER_JAR): a checked download, and the same as a Strimzi build plugin.
  const jarCard = page.locator('#provider-jar');
  assert.ok(await jarCard.evaluate((d) => d.open), 'the jar card is open beside a new token');
  const curl = await page.locator('#provider-jar-curl').innerText();
  const sha = curl.match(/^echo '([0-9a-f]{128})  cluecdc-config-provider\.jar' \| sha512sum -c$/m)?.[1];
  assert.ok(sha, 'a sha512sum -c line: ' + curl);
  assert.match(curl, new RegExp(`curl -fsSLO ${app.url.replace(/[.]/g, '\\.')}/static/cluecdc-config-provider\\.jar`));
  assert.match(await page.locator('#provider-jar-strimzi').innerText(), new RegExp(`sha512sum: ${sha}`));
  const jar = await page.request.get(app.url + '/static/cluecdc-config-provider.jar');
  assert.equal(jar.status(), 200);
  assert.equal(createHash('sha512').update(await jar.body()).digest('hex'), sha, 'the download is what the page says');
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
  assert.equal(await viewer.locator('a[href$="/edit"], a[href$="/delete"]').count(), 0, 'no edit or forget links');
});

/** What the config provider endpoint answers a token with (401: not a token it knows). */
async function resolveStatus(providerToken) {
  const res = await fetch(app.url + '/internal/v1/config-provider/resolve', {
    method: 'POST',
    headers: { authorization: `Bearer ${providerToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ secret_ref: 'sec_none', fields: ['password'] }),
  });
  return res.status;
}

test('an admin edits both clusters (a refused edit stores nothing), issues a new provider token and forgets them, in-use first refused', async () => {
  const env = process.env;
  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.goto(app.url + '/clusters');
  const [, before] = await api(app, token, 'GET', '/api/v1/kafka-clusters');
  const kafka = before.items[0];

  // Kafka: refused edit, errors under the fields, 422, nothing stored.
  await page.getByRole('link', { name: 'Edit stack kafka' }).click();
  assert.equal(await page.getByLabel('Bootstrap servers').inputValue(), env.KAFKA_BOOTSTRAP, 'the form starts from what is stored');
  await page.getByLabel('Bootstrap servers').fill('no-port-here');
  await page.getByLabel('Security protocol').selectOption('SASL_PLAINTEXT');
  await page.getByLabel(/SASL password/).fill('typed-kafka-secret');
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST'),
    page.getByRole('button', { name: 'Save Kafka cluster' }).click(),
  ]);
  assert.equal(refused.status(), 422);
  assert.match(await page.locator('#k-bootstrap-error').innerText(), /host:port/);
  assert.match(await page.locator('#k-mechanism-error').innerText(), /SCRAM|PLAIN/);
  assert.equal(await page.getByLabel('Bootstrap servers').getAttribute('aria-invalid'), 'true');
  assert.equal(await page.getByLabel('Bootstrap servers').inputValue(), 'no-port-here', 'what was typed stays');
  assert.ok(!(await page.content()).includes('typed-kafka-secret'), 'the password is not echoed back');
  await screenshot(page, 'kafka-edit-refused');
  const [, unchanged] = await api(app, token, 'GET', `/api/v1/kafka-clusters/${kafka.id}`);
  assert.equal(unchanged.bootstrap_servers, env.KAFKA_BOOTSTRAP);
  assert.equal(unchanged.security_protocol, 'PLAINTEXT');
  assert.equal(unchanged.updated_at, kafka.updated_at, 'a refused edit stores nothing');

  await page.getByLabel('Name', { exact: true }).fill('stack kafka 2');
  await page.getByLabel('Bootstrap servers').fill(env.KAFKA_BOOTSTRAP);
  await page.getByLabel('Security protocol').selectOption('PLAINTEXT');
  await page.getByRole('button', { name: 'Save Kafka cluster' }).click();
  assert.match(await page.locator('main').innerText(), /Kafka cluster stack kafka 2 saved/);
  const [, renamed] = await api(app, token, 'GET', `/api/v1/kafka-clusters/${kafka.id}`);
  assert.equal(renamed.name, 'stack kafka 2');
  assert.equal(renamed.bootstrap_servers, env.KAFKA_BOOTSTRAP);

  // Connect: basic auth without a password is refused by field; then a rename.
  await page.getByRole('link', { name: 'Edit stack connect' }).click();
  assert.match(await page.locator('main').innerText(), /Basic auth password — not set/);
  await page.getByLabel('Basic auth user').fill('someone');
  await page.getByRole('button', { name: 'Save Connect cluster' }).click();
  assert.match(await page.locator('#c-password-error').innerText(), /basic auth needs both/);
  await page.getByLabel('Basic auth user').fill('');
  await page.getByLabel('Name', { exact: true }).fill('stack connect 2');
  await screenshot(page, 'connect-edit');
  await page.getByRole('button', { name: 'Save Connect cluster' }).click();
  assert.match(await page.locator('main').innerText(), /Connect cluster stack connect 2 saved/);
  const [, connects] = await api(app, token, 'GET', '/api/v1/connect-clusters');
  const connect = connects.items[0];
  assert.equal(connect.name, 'stack connect 2');
  assert.equal(connect.url, env.CONNECT_URL.replace(/\/$/, ''));
  assert.equal(connect.basic_auth_user, null);
  assert.equal(connect.kafka_cluster_id, kafka.id, 'fields not changed keep their value');

  // A new provider token: shown once with the worker lines; the old one stops working.
  assert.notEqual(await resolveStatus(firstToken), 401, 'the first token works before');
  await page.getByRole('link', { name: 'Edit stack connect 2' }).click();
  await page.getByRole('button', { name: 'Issue a new provider token' }).click();
  const shown = await page.locator('#created-token').innerText();
  assert.match(shown, /config\.providers\.cluecdc\.class=io\.cluecdc\.connect\.ClueCdcConfigProvider/);
  assert.match(shown, TOKEN_LINE);
  const newToken = shown.match(TOKEN_LINE)[1];
  assert.notEqual(newToken, firstToken);
  assert.match(await page.locator('#created-heading').innerText(), /New provider token for stack connect 2/);
  await screenshot(page, 'provider-token-new');
  assert.equal(await resolveStatus(firstToken), 401, 'the old token stops working at once');
  assert.notEqual(await resolveStatus(newToken), 401, 'the new one works');
  await page.goto(app.url + '/clusters');
  assert.equal(await page.locator('#created-token').count(), 0, 'shown only once');

  // Forget: the Kafka cluster is in use by the Connect cluster, and the page says so.
  await page.getByRole('link', { name: 'Forget stack kafka 2' }).click();
  assert.match(await page.locator('main').innerText(), /brokers, their topics and records are not touched/);
  const [inUse] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST'),
    page.getByRole('button', { name: 'Forget stack kafka 2' }).click(),
  ]);
  assert.equal(inUse.status(), 409);
  assert.match(await page.getByRole('alert').innerText(), /used by Connect cluster stack connect 2/);
  await screenshot(page, 'kafka-forget-refused');
  await page.goto(app.url + '/clusters');
  await page.getByRole('link', { name: 'Forget stack connect 2' }).click();
  await page.getByRole('button', { name: 'Forget stack connect 2' }).click();
  assert.match(await page.locator('main').innerText(), /Connect cluster stack connect 2 forgotten/);
  await page.getByRole('link', { name: 'Forget stack kafka 2' }).click();
  await page.getByRole('button', { name: 'Forget stack kafka 2' }).click();
  assert.match(await page.locator('main').innerText(), /Kafka cluster stack kafka 2 forgotten/);
  assert.equal((await api(app, token, 'GET', '/api/v1/kafka-clusters'))[1].items.length, 0);
  assert.equal((await api(app, token, 'GET', '/api/v1/connect-clusters'))[1].items.length, 0);
  assert.equal(await resolveStatus(newToken), 401, 'a forgotten cluster\'s token resolves nothing');
  const unexpected = errors.filter((e) => !/status of 409/.test(e)); // the in-use refusal answers 409
  assert.deepEqual(unexpected, [], 'console errors: ' + unexpected.join('\n'));

  // A viewer gets no edit pages.
  const viewer = await browser.newPage();
  await signIn(viewer, app, 'val');
  const res = await viewer.goto(app.url + `/clusters/kafka/${kafka.id}/edit`);
  assert.equal(res.status(), 403);
});
