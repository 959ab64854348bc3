// source.mjs - the cost of the mcp plugin (MCP servers as a tool source):
// the official client calling server-everything's `echo` directly (its own
// StdioClientTransport) against the same client calling `ev_echo` through
// `toolhost mcp` with the mcp plugin importing that server, in the same
// run, rounds alternated (direct, via, direct, via, ...) so that both see
// the same machine.  Sequential calls: latency p50/p99/mean; 16 in flight:
// calls/s.  Target (issue 32): via toolhost <= 1.3x the direct mean
// latency.  Prints a table, a "target:" line and one JSON line.
// With TH_BENCH_RELAY naming bench/mcp/relay.c built (bench-mcp-source
// builds it), a third peer in the same rounds: the same client calling the
// same server through that minimal C relay, the floor of any extra hop.
// Usage: node bench/mcp/source.mjs [TOOLHOST] (TH_BENCH_QUICK=1: short).
import os from 'node:os';
import path from 'node:path';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { root, sdk } from './sdk.mjs';

const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');

const quick = process.env.TH_BENCH_QUICK === '1';
const ROUNDS = quick ? 2 : 5, SEQ = quick ? 200 : 1000, PAR = quick ? 400 : 2000;
const INFLIGHT = 16;
const bin = path.resolve(process.argv[2] || path.join(root, 'build/toolhost'));
const build = path.dirname(bin);
const everything = path.join(root, 'tests/mcp/node_modules/.bin/mcp-server-everything');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'th-mcpsrc-bench-'));
const cfg = path.join(tmp, 'c.yaml');
writeFileSync(cfg, `host:
  log_level: warn
plugins:
  - name: mcp
    path: ${path.join(build, 'plugins/mcp.so')}
    config:
      servers:
        - name: ev
          command: [${everything}, stdio]
          max_concurrency: 64
toolsets:
  - name: t
    tools: ["*"]
`);

async function open(command, args) {
  const transport = new StdioClientTransport({ command, args, stderr: 'ignore' });
  const client = new Client({ name: 'bench', version: '1' }, { capabilities: {} });
  await client.connect(transport);
  client.benchPid = transport.pid;
  return client;
}

// The CPU time and the context switches of a process in the middle (all
// its threads, from /proc), read around its sequential calls: figures a
// busy machine moves far less than latency, since they count the work
// and the wake-ups of the hop, not the time spent waiting for a core.
function usage(pid) {
  const u = { cpu_ns: 0, vol: 0, invol: 0 };
  if (!pid) return u;
  let tasks = [];
  try { tasks = readdirSync(`/proc/${pid}/task`); } catch { return u; }
  for (const t of tasks) {
    try {
      const st = readFileSync(`/proc/${pid}/task/${t}/status`, 'utf8');
      u.vol += +/^voluntary_ctxt_switches:\s+(\d+)/m.exec(st)[1];
      u.invol += +/^nonvoluntary_ctxt_switches:\s+(\d+)/m.exec(st)[1];
      u.cpu_ns += +readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0];
    } catch { /* a thread that ended meanwhile */ }
  }
  return u;
}

const pct = (a, p) => a[Math.min(a.length - 1, Math.floor(a.length * p))];
async function seq(client, tool, n, lat) {
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const r = await client.callTool({ name: tool, arguments: { message: `m${i}` } });
    lat.push(Number(process.hrtime.bigint() - t0) / 1000);
    if (r.isError || r.content[0].text !== `Echo: m${i}`)
      throw new Error(`${tool}: ${JSON.stringify(r)}`);
  }
}
async function par(client, tool, n) {
  let next = 0;
  const t0 = process.hrtime.bigint();
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const r = await client.callTool({ name: tool, arguments: { message: `p${i}` } });
      if (r.isError) throw new Error(`${tool}: ${JSON.stringify(r)}`);
    }
  };
  await Promise.all(Array.from({ length: INFLIGHT }, worker));
  return n / (Number(process.hrtime.bigint() - t0) / 1e9);
}

const direct = await open(everything, ['stdio']);
const via = await open(bin, ['mcp', '-c', cfg]);
const relayBin = process.env.TH_BENCH_RELAY;
const relay = relayBin ? await open(relayBin, [everything, 'stdio']) : null;
const peer = (name, key, client, tool, mid) =>
  ({ name, key, client, tool, lat: [], cps: [], mid, use: { cpu_ns: 0, vol: 0, invol: 0 } });
const runs = [peer('direct', 'direct', direct, 'echo', false),
              peer('via toolhost', 'via', via, 'ev_echo', true)];
if (relay)
  runs.push(peer('via C relay', 'relay', relay, 'echo', true));
for (const r of runs) await seq(r.client, r.tool, 100, []); // warm up
for (let round = 0; round < ROUNDS; round++)
  for (const r of runs) {
    const u0 = r.mid ? usage(r.client.benchPid) : null;
    await seq(r.client, r.tool, SEQ, r.lat);
    if (u0) {
      const u1 = usage(r.client.benchPid);
      for (const k of ['cpu_ns', 'vol', 'invol']) r.use[k] += u1[k] - u0[k];
    }
    r.cps.push(await par(r.client, r.tool, PAR));
  }
await direct.close();
await via.close();
if (relay) await relay.close();
rmSync(tmp, { recursive: true, force: true });

const cpu = (os.cpus()[0] || {}).model;
console.log(`machine: ${os.cpus().length} cores, ${cpu || 'unknown CPU'}, load ` +
            `${os.loadavg()[0].toFixed(2)}; node ${process.version}`);
console.log(`server-everything echo, official client over stdio: ${ROUNDS} rounds of ` +
            `${SEQ} sequential calls and ${PAR} calls ${INFLIGHT} in flight, alternated`);
console.log('path            p50 us   p99 us  mean us   calls/s');
const out = {};
for (const r of runs) {
  r.lat.sort((a, b) => a - b);
  const mean = r.lat.reduce((a, b) => a + b, 0) / r.lat.length;
  const cps = r.cps.reduce((a, b) => a + b, 0) / r.cps.length;
  out[r.key] =
    { p50_us: pct(r.lat, 0.5), p99_us: pct(r.lat, 0.99), mean_us: mean, calls_s: cps };
  if (r.mid) {
    const n = r.lat.length;
    Object.assign(out[r.key], { mid_cpu_us: r.use.cpu_ns / n / 1000,
                                mid_switches: (r.use.vol + r.use.invol) / n,
                                mid_vol_switches: r.use.vol / n });
  }
  console.log(`${r.name.padEnd(14)} ${pct(r.lat, 0.5).toFixed(0).padStart(7)} ` +
              `${pct(r.lat, 0.99).toFixed(0).padStart(8)} ${mean.toFixed(0).padStart(8)} ` +
              `${cps.toFixed(0).padStart(9)}`);
}
const ratio = out.via.mean_us / out.direct.mean_us;
const cratio = out.direct.calls_s / out.via.calls_s;
const met = ratio <= 1.3;
const p50ratio = out.via.p50_us / out.direct.p50_us;
console.log(`p50 via toolhost over direct: ${p50ratio.toFixed(2)}x; calls/s direct over ` +
            `via toolhost: ${cratio.toFixed(2)}x (the mean carries the machine's outliers: ` +
            `compare the p50 on a busy machine)`);
for (const r of runs)
  if (r.mid)
    console.log(`${r.name}: the process in the middle, per sequential call: ` +
                `${out[r.key].mid_cpu_us.toFixed(1)} us of CPU, ` +
                `${out[r.key].mid_switches.toFixed(2)} context switches ` +
                `(${out[r.key].mid_vol_switches.toFixed(2)} voluntary: its wake-ups)`);
if (out.relay)
  console.log(`the hop alone: C relay over direct ${(out.relay.mean_us / out.direct.mean_us).toFixed(2)}x ` +
              `mean, ${(out.relay.p50_us / out.direct.p50_us).toFixed(2)}x p50; via toolhost over the C relay ` +
              `${(out.via.mean_us / out.relay.mean_us).toFixed(2)}x mean, ` +
              `${(out.via.p50_us / out.relay.p50_us).toFixed(2)}x p50`);
console.log(`target: mcp source, a call through toolhost to a stdio server over the same client ` +
            `calling it directly (mean latency): ${met ? 'met' : 'NOT met'} ` +
            `(ratio ${ratio.toFixed(2)}x, target <= 1.3x)`);
console.log(JSON.stringify({ bench: 'mcp_source', quick, load1: os.loadavg()[0], rounds: ROUNDS,
                             seq: SEQ, par: PAR, inflight: INFLIGHT, ...out,
                             p50_ratio: p50ratio, calls_s_ratio: cratio,
                             target_mean: { ratio, limit: 1.3, met } }));
