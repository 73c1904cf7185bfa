import { listeningDashboard } from '../helpers/dashboard';
import { createTestDatabase, type TestDatabase } from '../helpers/db';

/**
 * Issue 15: a request the dashboard's HTTP layer refuses before any route runs (a body that is
 * not JSON, one over the size limit) is the caller's mistake. It answered 500, as if the
 * dashboard had failed.
 */
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t.drop();
});

test('issue 15: a malformed or oversized request body is answered 4xx with its code, never 500', async () => {
  const app = await listeningDashboard(t.db);
  const post = (path: string, body: string) =>
    fetch(app.url(path), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
  const malformed = await post('/api/board', '{bad');
  expect(malformed.status).toBe(400);
  expect(await malformed.json()).toMatchObject({ error: { code: 'FST_ERR_CTP_INVALID_JSON_BODY' } });
  const oversized = await post('/', `"${'x'.repeat(2_000_000)}"`);
  expect(oversized.status).toBe(413);
  expect((await fetch(app.url('/api/board'))).status).toBe(200);
  await app.close();
});

test('issue 15: another method on a dashboard path is 405 naming GET; an unknown path is 404 with a code', async () => {
  const app = await listeningDashboard(t.db);
  const { url } = app;
  for (const method of ['POST', 'PUT', 'DELETE']) {
    const refused = await fetch(url('/api/runs?x=1'), { method });
    expect(refused.status).toBe(405);
    expect(refused.headers.get('allow')).toBe('GET, HEAD');
    expect(await refused.json()).toMatchObject({ error: { code: 'method_not_allowed' } });
  }
  const head = await fetch(url('/api/config'), { method: 'HEAD' });
  expect(head.status).toBe(200);
  const missing = await fetch(url('/api/nothing-here'));
  expect(missing.status).toBe(404);
  expect(await missing.json()).toMatchObject({ error: { code: 'not_found' } });
  await app.close();
});
