// hostile_http.mjs - the mcp plugin against a Streamable HTTP server that
// misbehaves on purpose (served by this script on 127.0.0.1): an event
// stream flooding progress, a body over max_message, a request never
// answered, a session that vanishes (404).  Each costs only its own call;
// the server's other tools keep answering, and a lost session is opened
// again.  Usage: node hostile_http.mjs TOOLHOST
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { check, deadline, fail } from './common.mjs';

const vg = process.env.TH_VALGRIND;
deadline(vg ? 400000 : 90000);
const bin = process.argv[2];
if (!bin) fail('usage: node hostile_http.mjs TOOLHOST');
const build = path.dirname(path.resolve(bin));

let session = 1, sessions = 0, cancelled = 0;
const obj = { type: 'object', properties: {} };
const tools = ['ok', 'flood', 'huge', 'silent', 'forget']
  .map((name) => ({ name, description: `hostile ${name}`, inputSchema: obj }));
const hung = [];
const srv = http.createServer((req, res) => {
  let body = '';
  req.on('data', (d) => { body += d; });
  req.on('end', () => {
    let m;
    try { m = JSON.parse(body); } catch { res.writeHead(400).end(); return; }
    const json = (o, h = {}) => {
      res.writeHead(200, { 'Content-Type': 'application/json', ...h });
      res.end(JSON.stringify(o));
    };
    if (m.method === 'initialize') {
      sessions++;
      return json({ jsonrpc: '2.0', id: m.id, result: {
        protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
        serverInfo: { name: 'hostile-http', version: '1' } } },
                  { 'Mcp-Session-Id': `s${session}` });
    }
    if (req.headers['mcp-session-id'] !== `s${session}`) {
      res.writeHead(404).end();
      return;
    }
    if (m.id === undefined) {
      if (m.method === 'notifications/cancelled') cancelled++;
      res.writeHead(202).end();
      return;
    }
    if (m.method === 'tools/list') return json({ jsonrpc: '2.0', id: m.id, result: { tools } });
    const text = (t) => json({ jsonrpc: '2.0', id: m.id,
                               result: { content: [{ type: 'text', text: t }] } });
    switch (m.params.name) {
    case 'ok': return text(`ok sessions ${sessions} cancelled ${cancelled}`);
    case 'flood': {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      const tok = m.params._meta.progressToken;
      for (let i = 0; i < 20000; i++)
        res.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0',
          method: 'notifications/progress',
          params: { progressToken: i % 2 ? tok : 'nobody', progress: i, total: 20000 } })}\n\n`);
      res.write('data: not json\n\n');
      res.end(`data: ${JSON.stringify({ jsonrpc: '2.0', id: m.id,
        result: { content: [{ type: 'text', text: 'flooded' }] } })}\n\n`);
      return;
    }
    case 'huge': return text('z'.repeat(2 * 1024 * 1024));
    case 'silent': hung.push(res); return;
    case 'forget': session++; res.writeHead(404).end(); return;
    }
  });
});
await new Promise((ok) => srv.listen(0, '127.0.0.1', ok));
const port = srv.address().port;
const dir = mkdtempSync(path.join(os.tmpdir(), 'th-mcpsrc-hh-'));
writeFileSync(path.join(dir, 'c.yaml'), `plugins:
  - name: mcp
    path: ${build}/plugins/mcp.so
    config:
      restart_initial: 50ms
      max_message: 1048576
      servers:
        - name: hh
          url: http://127.0.0.1:${port}/mcp
          timeout: ${vg ? '20s' : '2s'}
toolsets:
  - name: t
    tools: ["*"]
`);
const cfg = path.join(dir, 'c.yaml');
const transport = new StdioClientTransport(vg
  ? { command: '/bin/sh', args: ['-c', `exec ${vg} "$0" "$@"`, bin, 'mcp', '-c', cfg],
      stderr: 'inherit' }
  : { command: bin, args: ['mcp', '-c', cfg], stderr: 'inherit' });
const client = new Client({ name: 'toolhost-tests', version: '1.0.0' }, { capabilities: {} });
await client.connect(transport);
const txt = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
const call = (name) => client.callTool({ name, arguments: {} }, undefined, { timeout: 30000 });

try {
  let r = await call('hh_ok');
  check(txt(r) === 'ok sessions 1 cancelled 0', `ok: ${JSON.stringify(r)}`);
  const seen = [];
  r = await client.callTool({ name: 'hh_flood', arguments: {} }, undefined,
                            { onprogress: (p) => seen.push(p), timeout: 30000 });
  check(!r.isError && txt(r) === 'flooded', `flood: ${JSON.stringify(r)}`);
  check(seen.length >= 1, 'flood: no progress');
  r = await call('hh_huge');
  check(r.isError && /max_message/.test(txt(r)), `huge: ${JSON.stringify(r)}`);
  r = await call('hh_silent');
  check(r.isError && /did not answer 'silent' within its timeout/.test(txt(r)),
        `silent: ${JSON.stringify(r)}`);
  // a lost session: marked down, then a new one
  r = await call('hh_forget');
  check(r.isError && /session is gone/.test(txt(r)), `forget: ${JSON.stringify(r)}`);
  let back = null;
  for (let i = 0; i < 3000 && !back; i++) {
    r = await call('hh_ok');
    if (!r.isError) back = txt(r);
    else {
      check(/unavailable|session is gone|could not be reached/.test(txt(r)), `while down: ${txt(r)}`);
      await new Promise((ok) => setTimeout(ok, 10));
    }
  }
  check(back && /^ok sessions 2 cancelled 1$/.test(back),
        `no new session, or the timed-out call not cancelled: ${back}`);
  console.log('ok: hostile http server survived');
} finally {
  await client.close();
  for (const res of hung) res.destroy();
  srv.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
