// run.mjs - MCP over stdio, one client (the SDK's Client +
// StdioClientTransport) against three servers with the same echo tool:
//   toolhost   build/toolhost mcp -c configs/default.yaml (echo.so)
//   sdk        the SDK's own McpServer on stdio (sdk_server.mjs)
//   line       a trivial JSON-line server (line_server.mjs): the floor
// For each: sequential calls (latency p50/p99) and 64 calls in flight
// (throughput).  Prints a table with ratios to the floor and one JSON
// line.  Usage: node bench/mcp/run.mjs [TOOLHOST] (TH_BENCH_QUICK=1: short).
import os from 'node:os';
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { root, sdk } from './sdk.mjs';

const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');

const quick = process.env.TH_BENCH_QUICK === '1';
const SEQ = quick ? 300 : 3000, PAR = quick ? 1000 : 10000, INFLIGHT = 64;
const bin = process.argv[2] || path.join(root, 'build/toolhost');
const here = path.join(root, 'bench/mcp');
const servers = [
  { name: 'line', command: process.execPath, args: [path.join(here, 'line_server.mjs')] },
  { name: 'sdk', command: process.execPath, args: [path.join(here, 'sdk_server.mjs')] },
  { name: 'toolhost', command: bin,
    args: ['mcp', '-c', path.join(root, 'configs/default.yaml'), '--log-level', 'warn'] },
];

function pct(a, p) { return a[Math.min(a.length - 1, Math.floor(a.length * p))]; }

async function one(s) {
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(new StdioClientTransport({ command: s.command, args: s.args, stderr: 'ignore' }));
  const call = (i) => client.callTool({ name: 'echo', arguments: { text: `hello ${i}` } });
  for (let i = 0; i < 200; i++) await call(i); // warm up
  const lat = [];
  for (let i = 0; i < SEQ; i++) {
    const t0 = process.hrtime.bigint();
    const r = await call(i);
    lat.push(Number(process.hrtime.bigint() - t0) / 1e3);
    if (r.content[0].text !== `hello ${i}`) throw new Error(`${s.name}: bad answer`);
  }
  lat.sort((a, b) => a - b);
  const t0 = process.hrtime.bigint();
  let next = 0;
  await Promise.all(Array.from({ length: INFLIGHT }, async () => {
    while (next < PAR) await call(next++);
  }));
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  await client.close();
  return { name: s.name, p50_us: pct(lat, 0.5), p99_us: pct(lat, 0.99),
           mean_us: lat.reduce((a, b) => a + b, 0) / lat.length, calls_s: PAR / secs };
}

const cpu = (readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/) || [])[1];
console.log(`machine: ${os.cpus().length} cores online, ${cpu || 'unknown CPU'}; node ${process.version}`);
console.log(`sequential: ${SEQ} calls; parallel: ${PAR} calls, ${INFLIGHT} in flight`);
const res = [];
for (const s of servers) res.push(await one(s));
const floor = res[0];
console.log('server      p50 us   p99 us  mean us  x floor(p50)   calls/s  floor/calls_s');
for (const r of res)
  console.log(`${r.name.padEnd(10)} ${r.p50_us.toFixed(0).padStart(7)} ${r.p99_us.toFixed(0).padStart(8)} ` +
              `${r.mean_us.toFixed(0).padStart(8)} ${(r.p50_us / floor.p50_us).toFixed(2).padStart(13)} ` +
              `${r.calls_s.toFixed(0).padStart(9)} ${(floor.calls_s / r.calls_s).toFixed(2).padStart(14)}`);
for (const r of res) {
  r.p50_x_floor = r.p50_us / floor.p50_us;
  r.floor_calls_s_x = floor.calls_s / r.calls_s;
}
console.log(JSON.stringify({ bench: 'mcp', quick, seq: SEQ, par: PAR,
                             inflight: INFLIGHT, results: res }));
