#!/usr/bin/env node
// A stand-in deployment target for the quick start: each port is one environment's server.
// POST /deploy?sha=SHA records the served revision; GET /revision reports it.
// Usage: node examples/target-server.js [port ...]   (default: 8480 8481)
const http = require('node:http');

const ports = process.argv.slice(2).map(Number);
for (const port of ports.length ? ports : [8480, 8481]) {
  let revision = null;
  http
    .createServer((req, res) => {
      const url = new URL(req.url, `http://127.0.0.1:${port}`);
      if (req.method === 'POST' && url.pathname === '/deploy') {
        revision = url.searchParams.get('sha');
        res.writeHead(200, { 'content-type': 'text/plain' }).end(`serving ${revision}\n`);
      } else if (url.pathname === '/revision') {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ revision }));
      } else {
        res.writeHead(404).end('not found\n');
      }
    })
    .listen(port, '127.0.0.1', () => console.log(`target listening on http://127.0.0.1:${port}`));
}
