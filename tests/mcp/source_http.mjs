// source_http.mjs - the mcp plugin importing a server over Streamable HTTP:
// toolhost's own HTTP front (`toolhost serve` with an http:// listen entry
// and a bearer token), imported by a second toolhost (`toolhost mcp`, the
// token in its `headers:` from the environment) and driven by the official
// SDK client: list, call, progress (an event stream), cancel, then the
// HTTP server killed (its tools answer 'unavailable') and started again on
// the same port (a new session: they answer again).
// Usage: node source_http.mjs TOOLHOST (its folder holds plugins/)
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { check, deadline, fail } from './common.mjs';

const vg = process.env.TH_VALGRIND;
deadline(vg ? 400000 : 100000);
const bin = process.argv[2];
if (!bin) fail('usage: node source_http.mjs TOOLHOST');
const build = path.dirname(path.resolve(bin));
const dir = mkdtempSync(path.join(os.tmpdir(), 'th-mcpsrc-http-'));
const TOKEN = 'mcpsrc-http-token-0123456789abcdef';
const port = await new Promise((resolve, reject) => {
  const s = net.createServer();
  s.once('error', reject);
  s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
});
writeFileSync(path.join(dir, 'srv.yaml'), `host:
  listen: ["unix:${dir}/th.sock", "http://127.0.0.1:${port}/mcp"]
mcp:
  tokens:
    - {user: alice, env: MCPSRC_TOKEN}
plugins:
  - name: echo
    path: ${build}/plugins/echo.so
toolsets:
  - name: t
    tools: ["*"]
    allow_users: [alice]
`);
writeFileSync(path.join(dir, 'client.yaml'), `plugins:
  - name: mcp
    path: ${build}/plugins/mcp.so
    config:
      restart_initial: 200ms
      restart_max: 1s
      servers:
        - name: th
          url: http://127.0.0.1:${port}/mcp
          headers: {Authorization: "Bearer \${MCPSRC_TOKEN}"}
          timeout: 30s
toolsets:
  - name: t
    tools: ["*"]
`);
const env = { ...process.env, MCPSRC_TOKEN: TOKEN };

// the HTTP server; resolves once it serves
function serve() {
  const p = spawn(bin, ['serve', '-c', path.join(dir, 'srv.yaml')],
                  { env, stdio: ['ignore', 'ignore', 'pipe'] });
  return new Promise((resolve, reject) => {
    let log = '';
    p.stderr.on('data', (d) => {
      log += d;
      if (/serving MCP \(Streamable HTTP\)/.test(log)) resolve(p);
    });
    p.once('exit', (c) => reject(new Error(`serve exited ${c}: ${log}`)));
  });
}
let srv = await serve();
// fail() exits at once: the HTTP server goes with this script whatever ends it
process.on('exit', () => { try { srv.kill('SIGKILL'); } catch { /* gone */ } });
const transport = new StdioClientTransport(vg
  ? { command: '/bin/sh', args: ['-c', `exec ${vg} "$0" "$@"`, bin, 'mcp', '-c',
                                 path.join(dir, 'client.yaml')], env, stderr: 'inherit' }
  : { command: bin, args: ['mcp', '-c', path.join(dir, 'client.yaml')], env,
      stderr: 'inherit' });
const client = new Client({ name: 'toolhost-tests', version: '1.0.0' }, { capabilities: {} });
await client.connect(transport);
const txt = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

try {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  check(names.includes('th_echo') && names.includes('th_echo_async'),
        `tools/list: ${names}`);
  check(tools.find((t) => t.name === 'th_echo').inputSchema.properties.text,
        'th_echo inputSchema');
  let r = await client.callTool({ name: 'th_echo', arguments: { text: 'over http ✓' } });
  check(!r.isError && txt(r) === 'over http ✓', `th_echo: ${JSON.stringify(r)}`);

  const seen = [];
  r = await client.callTool(
    { name: 'th_echo_async', arguments: { text: 'done', steps: 4, delay_ms: 50 } },
    undefined, { onprogress: (p) => seen.push(p), timeout: 30000 });
  check(!r.isError && txt(r) === 'done', `th_echo_async: ${JSON.stringify(r)}`);
  check(seen.length >= 1, `no progress over http: ${JSON.stringify(seen)}`);

  const ac = new AbortController();
  let progressed = false;
  try {
    await client.callTool(
      { name: 'th_echo_async', arguments: { text: 'x', steps: 1000, delay_ms: 50 } },
      undefined, { signal: ac.signal, timeout: 30000,
                   onprogress: () => { if (!progressed) { progressed = true; ac.abort('t'); } } });
    fail('the cancelled call answered');
  } catch (e) {
    check(progressed, `cancel before progress: ${e}`);
  }
  r = await client.callTool({ name: 'th_echo', arguments: { text: 'after cancel' } });
  check(txt(r) === 'after cancel', `after cancel: ${JSON.stringify(r)}`);

  // the server goes away: 'unavailable'; it comes back: a new session
  srv.kill('SIGKILL');
  await new Promise((ok) => srv.once('exit', ok));
  let unavailable = null;
  for (let i = 0; i < 2000 && !unavailable; i++) {
    r = await client.callTool({ name: 'th_echo', arguments: { text: 'gone?' } });
    check(r.isError, `answered with the server gone: ${JSON.stringify(r)}`);
    // ABI 1.5: not reached, or its session gone: the code 'unavailable'
    check(r._meta && r._meta['toolhost/error'] === 'unavailable',
          `server gone, not 'unavailable': ${JSON.stringify(r._meta)}`);
    if (/is unavailable/.test(txt(r))) unavailable = txt(r);
    else await new Promise((ok) => setTimeout(ok, 10));
  }
  check(unavailable && /server 'th' is unavailable/.test(unavailable),
        `never unavailable: ${txt(r)}`);
  srv = await serve();
  let back = false;
  for (let i = 0; i < 3000 && !back; i++) {
    r = await client.callTool({ name: 'th_echo', arguments: { text: 'back' } });
    if (!r.isError && txt(r) === 'back') back = true;
    else await new Promise((ok) => setTimeout(ok, 10));
  }
  check(back, `no new session: ${JSON.stringify(r)}`);
  console.log(`ok: http source; unavailable: ${unavailable}`);
} finally {
  srv.kill('SIGKILL');
  await client.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
