import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startApp, launchBrowser, watchConsole, screenshot, createUser, createToken, signIn, api } from './harness.mjs';

// 120 real connectors on the stack's worker (created STOPPED, one RUNNING): the connectors list
// counts them by state, shows 50 a page, and a filter in the URL finds one.
const N = 120;
const prefix = `lst${process.pid}`;
const nameOf = (i) => `${prefix}-${String(i).padStart(3, '0')}`;
const RUNNING = 77;
const connect = process.env.CONNECT_URL;
let app, browser, token;

before(async () => {
  app = await startApp({ env: { CLUECDC_RECONCILE_INTERVAL: '1s', CLUECDC_LEAK_SCAN_INTERVAL: '1h' } });
  createUser(app, 'ada', 'admin');
  token = createToken(app, 'ada');
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await app?.stop();
  // Straight from the worker: the app is gone, and the shared stack keeps nothing of this test.
  for (let i = 0; i < N && connect; i++) {
    await fetch(`${connect}/connectors/${nameOf(i)}`, { method: 'DELETE' }).catch(() => {});
  }
});

async function until(what, check, ms = 180_000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await check();
    if (last === true) return;
    await new Promise((r) => setTimeout(r, 1000));
  }
  assert.fail(`${what}: ${JSON.stringify(last)}`);
}

test('with 120 connectors the list counts them by state, pages by 50, and a filter in the URL finds one', async () => {
  assert.ok(connect, 'run under scripts/test (it exports scripts/stack env)');
  const [s1, cluster] = await api(app, token, 'POST', '/api/v1/connect-clusters', { name: 'stack', url: connect });
  assert.equal(s1, 201);
  for (let i = 0; i < N; i += 10) {
    const batch = [];
    for (let j = i; j < i + 10; j++) {
      batch.push(api(app, token, 'POST', '/api/v1/connectors', {
        name: nameOf(j), connect_cluster_id: cluster.id, desired_state: j === RUNNING ? 'running' : 'stopped',
        config: { 'connector.class': 'org.apache.kafka.connect.file.FileStreamSourceConnector', file: '/dev/null', topic: `${prefix}-t` },
      }));
    }
    for (const [status, body] of await Promise.all(batch)) assert.equal(status, 201, JSON.stringify(body));
  }
  // The reconciler deploys all 120 and observes them in Connect.
  await until('all observed', async () => {
    const [, l] = await api(app, token, 'GET', '/api/v1/connectors?limit=1');
    return (l.counts?.stopped === N - 1 && l.counts?.running === 1) || l.counts;
  });

  // The JSON API: the same paging fields and filters as the page.
  const [, p3] = await api(app, token, 'GET', '/api/v1/connectors?page=3');
  assert.deepEqual([p3.total, p3.pages, p3.limit, p3.items.length], [N, 3, 50, 20]);
  assert.equal(p3.items[0].name, nameOf(100));
  const [, one] = await api(app, token, 'GET', `/api/v1/connectors?q=${nameOf(RUNNING)}`);
  assert.deepEqual(one.items.map((c) => c.name), [nameOf(RUNNING)]);
  const [bad, err] = await api(app, token, 'GET', '/api/v1/connectors?state=asleep');
  assert.equal(bad, 422);
  assert.match(err.error.fields.state, /choose one of failed, drifted/);

  const page = await browser.newPage();
  const errors = watchConsole(page);
  await signIn(page, app, 'ada');
  await page.getByRole('link', { name: 'Connectors' }).click();
  const counts = page.locator('#connector-list .counts');
  assert.match(await counts.innerText(), /^120 connectors: 119 stopped · 1 running$/);
  assert.equal(await page.locator('#connector-rows tr').count(), 50);
  assert.match(await page.locator('.pager').innerText(), /Rows 1–50 of 120 · page 1 of 3/);
  await screenshot(page, 'connectors-paged');

  await page.getByRole('link', { name: 'Next →' }).click();
  await page.waitForURL(/page=2/);
  assert.equal(await page.locator('#connector-rows tr').first().locator('a').first().innerText(), nameOf(50));

  // Failed and drifted first, then the rest by state: the 119 stopped before the running one,
  // which is the last row of the last page.
  await page.goto(`${app.url}/connectors?sort=state&page=3`);
  assert.equal(await page.locator('#connector-rows tr').count(), 20);
  assert.equal(await page.locator('#connector-rows tr').last().locator('a').first().innerText(), nameOf(RUNNING));

  // The filter box: one row, the filter in the URL, and the rows refresh with the filter kept.
  await page.goto(`${app.url}/connectors`);
  await page.getByLabel('Name contains').fill(`-${String(RUNNING).padStart(3, '0')}`);
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.waitForURL(/q=/);
  assert.equal(await page.locator('#connector-rows tr').count(), 1);
  assert.match(await counts.innerText(), /^1 connector matches: 1 running$/);
  await page.waitForResponse((r) => r.url().includes('q=') && r.request().headers()['hx-request'] === 'true', { timeout: 15_000 });
  await page.locator('#connector-rows tr').first().waitFor();
  assert.equal(await page.locator('#connector-rows tr').count(), 1, 'the refresh keeps the filter');
  assert.ok(await page.locator('.pager').count() === 0, 'one page: no pager');
  await screenshot(page, 'connectors-filtered');

  // A count is a link to that state; "Clear filters" goes back to all.
  await page.goto(`${app.url}/connectors`);
  await page.getByRole('link', { name: '1 running' }).click();
  await page.waitForURL(/state=running/);
  assert.equal(await page.locator('#connector-rows tr').count(), 1);
  assert.equal(await page.getByLabel('State').inputValue(), 'running');
  await page.getByRole('link', { name: 'Clear filters' }).click();
  await page.waitForURL(`${app.url}/connectors`);
  assert.equal(await page.locator('#connector-rows tr').count(), 50);

  // A filter matching nothing says so and how to get back.
  await page.goto(`${app.url}/connectors?q=no-such-connector`);
  assert.match(await page.locator('#connector-rows').innerText(), /No connector matches these filters/);
  assert.deepEqual(errors, []);
});
