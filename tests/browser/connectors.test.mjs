import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api } from './harness.mjs';

let app, browser, token;
const name = `browser-${process.pid}`;
const sink = `browser-sink-${process.pid}`;
const topic = `browser-topic-${process.pid}`;
const connect = process.env.CONNECT_URL;

before(async () => {
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h' } });
  createUser(app, 'ada', 'admin');
  createUser(app, 'val', 'viewer');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
});
after(async () => {
  // A failed run leaves nothing behind on the shared stack: its topic goes too.
  const [, kafkas] = app ? await api(app, token, 'GET', '/api/v1/kafka-clusters') : [0, { items: [] }];
  for (const k of kafkas.items ?? []) {
    await api(app, token, 'DELETE', `/api/v1/kafka-clusters/${k.id}/topics/${topic}?confirm=${topic}`).catch(() => {});
  }
  await browser?.close();
  await app?.stop();
  for (const n of [name, sink]) {
    if (connect) await fetch(`${connect}/connectors/${n}`, { method: 'DELETE' }).catch(() => {});
  }
});

test('the connectors page shows a desired connector turning RUNNING by itself, with its detail and the cluster pages', async () => {
  assert.ok(connect && process.env.KAFKA_BOOTSTRAP, 'run under scripts/test (it exports scripts/stack env)');
  const [s1, cluster] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: connect });
  assert.equal(s1, 201);
  const [s2] = await api(app, token, 'POST', '/api/v1/kafka-clusters', { name: 'stack kafka', bootstrap_servers: process.env.KAFKA_BOOTSTRAP });
  assert.equal(s2, 201);
  const [s3] = await api(app, token, 'POST', '/api/v1/connectors', {
    name, connect_cluster_id: cluster.id,
    config: { 'connector.class': 'org.apache.kafka.connect.file.FileStreamSourceConnector', file: '/dev/null', topic: name },
  });
  assert.equal(s3, 201);

  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.getByRole('link', { name: 'Connectors' }).click();
  // No reload: the rows refresh themselves with htmx.
  await page.locator(`#connector-rows tr:has-text("${name}") .state-running`).waitFor({ timeout: 60_000 });
  await screenshot(page, 'connectors');
  await page.getByRole('link', { name }).click();
  await page.locator('#connector-status .state-running').waitFor();
  assert.match(await page.locator('#connector-status').innerText(), /running with 1 task/);
  await screenshot(page, 'connector-detail');
  await page.getByRole('button', { name: 'Pause' }).click();
  await page.locator('#connector-status .state-paused').waitFor({ timeout: 30_000 });
  assert.match(await page.locator('main').innerText(), /pause requested/);

  await page.getByRole('link', { name: 'Clusters' }).click();
  assert.match(await page.locator('main').innerText(), /stack kafka/);
  await screenshot(page, 'clusters');
  await page.getByRole('link', { name: 'Topics' }).click();
  // The stack's broker holds every earlier test's topics, so Connect's own is found by name
  // (on the first page by name it may not be).
  assert.match(await page.locator('main').innerText(), /\d+ topics/);
  await page.getByLabel('Name contains').fill('cluecdc-connect-configs');
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.locator('main table', { hasText: 'cluecdc-connect-configs' }).waitFor({ timeout: 10_000 });
  await screenshot(page, 'topics');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});

test('a topic created from the Topics page, a sink added by hand that the plugin checks first, buttons that follow its state, then both deleted', async () => {
  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  const [, kafkas] = await api(app, token, 'GET', '/api/v1/kafka-clusters');
  const kafkaId = kafkas.items[0].id;

  // A topic: refused by field first, then created with explicit settings.
  await page.goto(app.url + '/topics');
  await page.getByText('Create a topic').click();
  await page.getByLabel('Topic name').fill('no spaces allowed');
  await page.getByLabel('Partitions').fill('0');
  await page.getByRole('button', { name: 'Create topic' }).click();
  assert.match(await page.locator('#t-name-error').innerText(), /letters, digits/);
  assert.match(await page.locator('#t-partitions-error').innerText(), /1 to 1000/);
  assert.equal(await page.getByLabel('Topic name').getAttribute('aria-invalid'), 'true');
  await screenshot(page, 'topic-create-refused');
  await page.getByLabel('Topic name').fill(topic);
  await page.getByLabel('Partitions').fill('1');
  await page.getByLabel('retention.ms').fill('3600000');
  await page.getByLabel('cleanup.policy').selectOption('delete');
  await page.getByRole('button', { name: 'Create topic' }).click();
  assert.match(await page.locator('main').innerText(), new RegExp(`Topic ${topic} created with 1 partition\\.`));
  const [st, created] = await api(app, token, 'GET', `/api/v1/kafka-clusters/${kafkaId}/topics/${topic}`);
  assert.equal(st, 200);
  assert.equal(created.partitions.length, 1);
  assert.equal(created.configs['retention.ms'], '3600000');
  assert.match(await page.locator(`tr:has-text("${topic}")`).innerText(), /0 records/);

  // A connector by hand: a plain-text password is refused before anything else, as the API does.
  await page.goto(app.url + '/connectors');
  await page.getByRole('link', { name: 'Add connector' }).click();
  await page.getByLabel('Connector class').selectOption('org.apache.kafka.connect.file.FileStreamSinkConnector');
  await page.getByLabel('Name', { exact: true }).fill(sink);
  await page.getByLabel('Key 1', { exact: true }).fill('topics');
  await page.getByLabel('Value 1', { exact: true }).fill(topic);
  await page.getByLabel('Key 2', { exact: true }).fill('file');
  await page.getByLabel('Value 2', { exact: true }).fill(`/tmp/${sink}.txt`);
  // One more row without script: the form comes back with a fourth, typed values kept.
  await page.getByRole('button', { name: 'Add a config row' }).click();
  await page.getByLabel('Key 4', { exact: true }).waitFor();
  assert.equal(await page.getByLabel('Value 2', { exact: true }).inputValue(), `/tmp/${sink}.txt`);
  await page.getByLabel('Key 3', { exact: true }).fill('connection.password');
  await page.getByLabel('Value 3', { exact: true }).fill('hunter2-plain');
  await page.getByRole('button', { name: 'Check with the plugin and add' }).click();
  await page.locator('#row-3-error', { hasText: 'looks like a secret' }).waitFor();
  assert.match(await page.locator('#row-3-error').innerText(), /looks like a secret.*\$\{cluecdc:/);
  assert.equal(await page.getByLabel('Key 3', { exact: true }).getAttribute('aria-invalid'), 'true');
  assert.ok(!(await page.content()).includes('hunter2-plain'), 'the secret is not echoed back');
  await screenshot(page, 'connector-new-secret-refused');

  // A key the plugin does not define: refused by the plugin, by key.
  await page.getByLabel('Key 3', { exact: true }).fill('fiel');
  await page.getByLabel('Value 3', { exact: true }).fill('/tmp/typo.txt');
  await page.getByRole('button', { name: 'Check with the plugin and add' }).click();
  // The plugin's answer replaces the form (htmx): wait for it, not for the old error.
  await page.locator('#row-3-error', { hasText: 'not a setting' }).waitFor();
  assert.match(await page.locator('#row-3-error').innerText(), /fiel: not a setting of FileStreamSinkConnector/);
  await screenshot(page, 'connector-new-plugin-refused');
  const [, still] = await api(app, token, 'GET', '/api/v1/connectors');
  assert.ok(!still.items.some((c) => c.name === sink), 'nothing stored while refused');

  await page.getByLabel('Key 3', { exact: true }).fill('');
  await page.getByLabel('Value 3', { exact: true }).fill('');
  await Promise.all([
    page.waitForURL(/\/connectors\/cn_/),
    page.getByRole('button', { name: 'Check with the plugin and add' }).click(),
  ]);
  assert.match(await page.locator('main').innerText(), /accepted by the plugin and added/);
  await page.locator('#connector-status .state-running').waitFor({ timeout: 60_000 });
  assert.match(await page.locator('#connector-status').innerText(), /running with 1 task\b/);
  const live = await (await fetch(`${connect}/connectors/${sink}/config`)).json();
  assert.equal(live.file, `/tmp/${sink}.txt`);
  assert.equal(live.topics, topic);

  // Buttons follow the desired state: running → Pause, Stop, Restart; paused → Resume, Stop.
  const actions = page.getByRole('region', { name: 'Actions' });
  assert.deepEqual(await actions.getByRole('button').allInnerTexts(), ['Pause', 'Stop', 'Restart']);
  await page.getByRole('button', { name: 'Pause' }).click();
  await page.locator('#connector-status .state-paused').waitFor({ timeout: 30_000 });
  assert.deepEqual(await actions.getByRole('button').allInnerTexts(), ['Resume', 'Stop']);
  await screenshot(page, 'connector-paused');
  await page.goto(app.url + '/connectors');
  const row = page.locator(`#connector-rows tr:has-text("${sink}")`);
  assert.deepEqual(await row.getByRole('button').allInnerTexts(), ['Resume', 'Stop']);
  await screenshot(page, 'connectors-with-actions');

  // A viewer sees the same pages without a single write control.
  const viewer = await browser.newPage();
  await signIn(viewer, app, 'val');
  for (const path of ['/connectors', (await page.locator(`a:has-text("${sink}")`).getAttribute('href')), '/topics', '/clusters']) {
    await viewer.goto(app.url + path);
    assert.equal(await viewer.locator('main form[method="post"], main [hx-post], main a[href$="/new"], main a[href$="/delete"]').count(), 0, `no write controls on ${path}`);
  }
  assert.equal((await viewer.goto(app.url + '/connectors/new')).status(), 403);

  // Delete the connector (name typed), then the topic (name typed; a wrong one refused).
  await page.getByRole('link', { name: sink }).click();
  await page.getByLabel('Connector name').fill(sink);
  await page.getByRole('button', { name: `Delete ${sink}` }).click();
  // The list pages at 50: the filter finds the topic among the stack's others.
  await page.goto(app.url + '/topics');
  await page.getByLabel('Name contains').fill(topic);
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.getByRole('link', { name: `Delete topic ${topic}` }).click();
  assert.match(await page.locator('main').innerText(), /1 partition and the 0 records/);
  await page.getByLabel('Type the topic name to confirm').fill('not-it');
  await page.getByRole('button', { name: `Delete ${topic}` }).click();
  assert.match(await page.locator('#confirm-error').innerText(), /type the topic name/);
  await screenshot(page, 'topic-delete-refused');
  await page.getByLabel('Type the topic name to confirm').fill(topic);
  await page.getByRole('button', { name: `Delete ${topic}` }).click();
  assert.match(await page.locator('main').innerText(), new RegExp(`Topic ${topic} deleted`));
  assert.equal((await api(app, token, 'GET', `/api/v1/kafka-clusters/${kafkaId}/topics/${topic}`))[0], 404);

  // Readable at 320 px: the form stacks, nothing scrolls sideways.
  const narrow = await browser.newPage({ viewport: { width: 320, height: 700 } });
  await signIn(narrow, app, 'ada');
  for (const path of ['/topics', '/clusters', '/connectors/new']) {
    await narrow.goto(app.url + path);
    assert.ok(await narrow.evaluate(() => document.documentElement.scrollWidth <= 320), `no sideways scroll at 320 px on ${path}`);
  }
  await screenshot(narrow, 'connector-new-320');
  assert.deepEqual(errors, [], 'console errors: ' + errors.join('\n'));
});
