// run.mjs - MCP with the official client (the SDK's Client) against three
// servers with the same echo tool, over stdio and over Streamable HTTP:
//   stdio (StdioClientTransport):
//     line       a trivial JSON-line server (line_server.mjs): the floor,
//                the client's ceiling
//     sdk        the SDK's own McpServer on stdio (sdk_server.mjs)
//     toolhost   build/toolhost mcp -c configs/default.yaml
//   Streamable HTTP (StreamableHTTPClientTransport):
//     line-http      a trivial node:http JSON server (http_line_server.mjs)
//     sdk-http       the SDK's StreamableHTTPServerTransport
//                    (sdk_http_server.mjs)
//     toolhost-http  build/toolhost serve with an http:// listen and a token
// For each: sequential calls (latency p50/p99) and 32 calls in flight
// (throughput).  Targets (issue 13): toolhost within 10% of the floor on
// both figures, on both transports ("target: ..." lines, as bench_target()
// prints them).  Prints a table with ratios to the floor and one JSON line.
// Usage: node bench/mcp/run.mjs [TOOLHOST] (TH_BENCH_QUICK=1: short).
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { setMaxListeners } from 'node:events';
import { root, sdk } from './sdk.mjs';

setMaxListeners(0); // the SDK's HTTP client adds an abort listener per call

const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');

const quick = process.env.TH_BENCH_QUICK === '1';
const SEQ = quick ? 300 : 3000, PAR = quick ? 1000 : 10000, INFLIGHT = 32;
const bin = process.argv[2] || path.join(root, 'build/toolhost');
const build = path.dirname(path.resolve(bin));
const here = path.join(root, 'bench/mcp');
const TOKEN = 'mcp-bench-token-0123456789';

const freePort = () => new Promise((resolve, reject) => {
  const s = net.createServer();
  s.once('error', reject);
  s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
});

async function waitPort(port, child, name) {
  for (let i = 0; i < 1000; i++) {
    if (child.exitCode !== null) throw new Error(`${name}: exited before listening`);
    const ok = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => { c.destroy(); resolve(true); });
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${name}: not listening on ${port}`);
}

const stdioServers = [
  { name: 'line', command: process.execPath, args: [path.join(here, 'line_server.mjs')] },
  { name: 'sdk', command: process.execPath, args: [path.join(here, 'sdk_server.mjs')] },
  { name: 'toolhost', command: bin,
    args: ['mcp', '-c', path.join(root, 'configs/default.yaml'), '--log-level', 'warn'] },
];

// HTTP servers: start() spawns the server and returns { url, headers, stop }.
const httpServers = [
  { name: 'line-http', start: (port) => [process.execPath, [path.join(here, 'http_line_server.mjs'), String(port)]] },
  { name: 'sdk-http', start: (port) => [process.execPath, [path.join(here, 'sdk_http_server.mjs'), String(port)]] },
  { name: 'toolhost-http', token: TOKEN, start: (port, dir) => {
      const cfg = path.join(dir, 'bench.yaml');
      writeFileSync(cfg, [
        'host:', '  log_level: warn',
        `  listen: ["unix:${dir}/th.sock", "http://127.0.0.1:${port}/mcp"]`,
        'plugins:', '  - name: echo', `    path: ${build}/plugins/echo.so`,
        // The official client (node's fetch) opens about two connections
        // per call in flight: a connection goes back to its pool only after
        // the caller has sent its next call, which then opens another.  With
        // 32 in flight and the event stream that makes 65 connections from
        // 127.0.0.1, one over the default per-address cap (64): toolhost
        // closed the 65th at accept and the run died with "other side
        // closed".  The floor servers have no such cap.
        'mcp:', '  max_connections_per_address: 256',
        '  tokens:', '    - {user: bench, env: TH_BENCH_MCP_TOKEN}',
        'toolsets:', '  - name: default', '    tools: ["*"]', ''].join('\n'));
      return [bin, ['serve', '-c', cfg, '--log-level', 'warn']];
    } },
];

function pct(a, p) { return a[Math.min(a.length - 1, Math.floor(a.length * p))]; }

async function measure(name, client) {
  const call = (i) => client.callTool({ name: 'echo', arguments: { text: `hello ${i}` } });
  for (let i = 0; i < 200; i++) await call(i); // warm up
  const lat = [];
  for (let i = 0; i < SEQ; i++) {
    const t0 = process.hrtime.bigint();
    const r = await call(i);
    lat.push(Number(process.hrtime.bigint() - t0) / 1e3);
    if (r.content[0].text !== `hello ${i}`) throw new Error(`${name}: bad answer`);
  }
  lat.sort((a, b) => a - b);
  const t0 = process.hrtime.bigint();
  let next = 0;
  await Promise.all(Array.from({ length: INFLIGHT }, async () => {
    while (next < PAR) {
      const i = next++;
      const r = await call(i);
      if (r.content[0].text !== `hello ${i}`) throw new Error(`${name}: bad answer`);
    }
  }));
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  return { name, p50_us: pct(lat, 0.5), p99_us: pct(lat, 0.99),
           mean_us: lat.reduce((a, b) => a + b, 0) / lat.length, calls_s: PAR / secs };
}

async function oneStdio(s) {
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(new StdioClientTransport({ command: s.command, args: s.args, stderr: 'ignore' }));
  const r = await measure(s.name, client);
  await client.close();
  return r;
}

async function oneHttp(s) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'th-mcp-bench-'));
  const port = await freePort();
  const [cmd, args] = s.start(port, dir);
  // The server's stderr is kept (its last 8 KiB) and printed if the run
  // fails: a refusal or a crash shows there, not in the client's error.
  const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'],
                                   env: { ...process.env, TH_BENCH_MCP_TOKEN: TOKEN } });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-8192); });
  try {
    await waitPort(port, child, s.name);
    const headers = s.token ? { Authorization: `Bearer ${s.token}` } : {};
    const client = new Client({ name: 'bench', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(
      new URL(`http://127.0.0.1:${port}/mcp`), { requestInit: { headers } }));
    const r = await measure(s.name, client);
    await client.close();
    return r;
  } catch (e) {
    console.error(`${s.name} failed; its stderr:\n${stderr || '(empty)'}`);
    throw e;
  } finally {
    child.kill('SIGTERM');
    await new Promise((resolve) => {
      if (child.exitCode !== null) return resolve();
      const t = setTimeout(() => { child.kill('SIGKILL'); resolve(); }, 5000);
      child.once('exit', () => { clearTimeout(t); resolve(); });
    });
    rmSync(dir, { recursive: true, force: true });
  }
}

function table(title, res) {
  const floor = res[0];
  console.log(`\n${title}`);
  console.log('server           p50 us   p99 us  mean us  x floor(p50)   calls/s  calls_s/floor');
  for (const r of res) {
    r.p50_x_floor = r.p50_us / floor.p50_us;
    r.calls_s_x_floor = r.calls_s / floor.calls_s;
    console.log(`${r.name.padEnd(15)} ${r.p50_us.toFixed(0).padStart(7)} ${r.p99_us.toFixed(0).padStart(8)} ` +
                `${r.mean_us.toFixed(0).padStart(8)} ${r.p50_x_floor.toFixed(2).padStart(13)} ` +
                `${r.calls_s.toFixed(0).padStart(9)} ${r.calls_s_x_floor.toFixed(2).padStart(14)}`);
  }
}

// As bench/bench.h's bench_target() prints it.
const targets = {};
function target(key, what, ratio, limit, atMost) {
  const met = atMost ? ratio <= limit : ratio >= limit;
  console.log(`target: ${what}: ${met ? 'met' : 'NOT met'} (ratio ${ratio.toFixed(2)}x, ` +
              `target ${atMost ? '<=' : '>='} ${limit}x)`);
  targets[`target_${key}`] = { ratio, limit, met };
}

const cpu = (readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/) || [])[1];
const allowed = os.availableParallelism ? os.availableParallelism() : os.cpus().length;
console.log(`machine: ${os.cpus().length} cores online, ${allowed} allowed` +
            `${allowed === 1 ? ' (pinned: taskset -c 0)' : ''}, ${cpu || 'unknown CPU'}, ` +
            `load ${os.loadavg()[0].toFixed(2)}; node ${process.version}`);
console.log(`official client: sequential ${SEQ} calls; ${PAR} calls, ${INFLIGHT} in flight`);
// TH_BENCH_ONLY=NAME runs one server (no ratios, no targets).
const only = process.env.TH_BENCH_ONLY;
const pick = (list) => list.filter((s) => !only || s.name === only);
const stdio = [];
for (const s of pick(stdioServers)) stdio.push(await oneStdio(s));
if (stdio.length) table('MCP over stdio', stdio);
const http = [];
for (const s of pick(httpServers)) http.push(await oneHttp(s));
if (http.length) table('MCP over Streamable HTTP', http);
for (const [label, res] of only ? [] : [['stdio', stdio], ['http', http]]) {
  const th = res[2];
  target(`${label}_p50`, `mcp ${label}, official client, sequential p50: toolhost over the trivial server`,
         th.p50_x_floor, 1.1, true);
  target(`${label}_calls`, `mcp ${label}, official client, ${INFLIGHT} in flight: toolhost calls/s over the trivial server's`,
         th.calls_s_x_floor, 0.9, false);
}
console.log(JSON.stringify({ bench: 'mcp', quick, load1: os.loadavg()[0], seq: SEQ, par: PAR,
                             inflight: INFLIGHT, stdio, http, ...targets }));
