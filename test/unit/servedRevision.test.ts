import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { askServedRevision } from '../../activities/qa/servedRevision';

/** One host serving two apps: the shop under /shop, another app at the root. */
let server: Server;
let origin: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    const answer: Record<string, string> = {
      '/shop/revision': 'aaaaaaa1111111',
      '/revision': 'bbbbbbb2222222',
      '/shop/version': 'ccccccc3333333',
    };
    const commit = answer[req.url ?? ''];
    if (commit) res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ commit }));
    else res.writeHead(404).end('not found');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((r) => server.close(r));
});

test('issue 11 Q2: a target served under a path is asked at <url><served_revision_path>, not at its host root', async () => {
  const shop = await askServedRevision(`${origin}/shop`, '/revision', 'aaaaaaa1111111');
  expect(shop).toMatchObject({ revision_check: 'match', observed_commit: 'aaaaaaa1111111' });
  expect(shop.detail).toContain(`${origin}/shop/revision`);
  // a trailing slash on the url and a custom path read the same way
  expect(await askServedRevision(`${origin}/shop/`, '/version', 'ccccccc3333333')).toMatchObject({
    revision_check: 'match',
  });
  // a url without a path is asked at the root, as before
  expect(await askServedRevision(origin, '/revision', 'aaaaaaa1111111')).toMatchObject({
    revision_check: 'mismatch',
    observed_commit: 'bbbbbbb2222222',
  });
});
