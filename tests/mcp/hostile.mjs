// hostile.mjs - the mcp plugin against tests/mcp/hostile_server.mjs (a
// server that floods, lies, never answers and sends a message over
// max_message), through toolhost's MCP front: each attack costs only its
// own call, and the server's other tools keep answering.
// Usage: node hostile.mjs TOOLHOST CONFIG
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { check, deadline, fail } from './common.mjs';

// `toolhost mcp -c CONFIG`, under valgrind when TH_VALGRIND holds its
// command line (make valgrind; the test reads valgrind's report on stderr)
async function connect() {
  const [bin, config] = process.argv.slice(2);
  if (!bin || !config) fail('usage: node script.mjs TOOLHOST CONFIG ...');
  const vg = process.env.TH_VALGRIND;
  const transport = new StdioClientTransport(vg
    ? { command: '/bin/sh', args: ['-c', `exec ${vg} "$0" "$@"`, bin, 'mcp', '-c', config],
        stderr: 'inherit' }
    : { command: bin, args: ['mcp', '-c', config], stderr: 'inherit' });
  const client = new Client({ name: 'toolhost-tests', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  return { client, transport };
}

deadline(process.env.TH_VALGRIND ? 400000 : 90000);
const { client } = await connect();
const txt = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
const ok = async (what) => {
  const r = await client.callTool({ name: 'h_ok', arguments: {} });
  check(!r.isError && /^ok \d+ cancelled \d+ open \d+$/.test(txt(r)),
        `h_ok after ${what}: ${JSON.stringify(r)}`);
  return txt(r);
};

// both pages listed; the lying schema left out, the bad name renamed;
const { tools } = await client.listTools();
const names = tools.map((t) => t.name);
for (const n of ['h_ok', 'h_flood', 'h_junk', 'h_huge', 'h_silent', 'h_wrongid',
                 'h_request', 'h_bad_name_'])
  check(names.includes(n), `tools/list lacks ${n}: ${names}`);
check(!names.includes('h_badschema'), `the lying schema was imported: ${names}`);
// a NUL in a name: the page is read (\u0000 is JSON), the tool left out
// (its name would be cut to 'nul')
check(!names.some((n) => n.startsWith('h_nul')), `a name with a NUL was imported: ${names}`);
await ok('listing');

let r = await client.callTool({ name: 'h_flood', arguments: {} });
check(!r.isError && txt(r) === 'flooded', `flood: ${JSON.stringify(r)}`);
await ok('a flood');

r = await client.callTool({ name: 'h_junk', arguments: {} });
check(!r.isError && txt(r) === 'junk sent', `junk: ${JSON.stringify(r)}`);
await ok('junk lines');

r = await client.callTool({ name: 'h_wrongid', arguments: {} });
check(!r.isError && txt(r) === 'right id', `wrong id: ${JSON.stringify(r)}`);

r = await client.callTool({ name: 'h_request', arguments: {} });
check(!r.isError && txt(r) === 'asked', `server requests: ${JSON.stringify(r)}`);
await ok('server requests');

// never answers: the server's timeout (4s in the config, scaled for the
// sanitizers and valgrind) ends the call,
// and other calls are served meanwhile
const silent = client.callTool({ name: 'h_silent', arguments: {} }, undefined,
                               { timeout: 30000 });
await ok('a silent call started');
r = await silent;
check(r.isError && /did not answer 'silent' within its timeout/.test(txt(r)),
      `silent: ${JSON.stringify(r)}`);
// ABI 1.5: the server's timeout is the backend's, not the call's deadline
check(r._meta && r._meta['toolhost/error'] === 'backend_timeout',
      `silent, not backend_timeout: ${JSON.stringify(r._meta)}`);
// the server was told: notifications/cancelled with the call's id
const after = await ok('a timed-out call');
check(/cancelled 1 open 0$/.test(after), `the server was not told of the timeout: ${after}`);

// the caller cancels: the server is told too
const ac = new AbortController();
const aborted = client.callTool({ name: 'h_silent', arguments: {} }, undefined,
                                { signal: ac.signal, timeout: 60000 })
  .then(() => 'answered', () => 'rejected');
let state = '';
for (let i = 0; i < 2000 && !/open 1$/.test(state); i++) state = await ok('a silent call');
check(/open 1$/.test(state), `the silent call never reached the server: ${state}`);
ac.abort('test');
check(await aborted === 'rejected', 'the aborted call answered');
for (let i = 0; i < 2000 && !/cancelled 2 open 0$/.test(state); i++) {
  state = await ok('a cancel');
  if (!/cancelled 2/.test(state)) await new Promise((r) => setTimeout(r, 10));
}
check(/cancelled 2 open 0$/.test(state), `the server was not told of the cancel: ${state}`);

// a message over max_message: the server is killed and restarted
r = await client.callTool({ name: 'h_huge', arguments: {} }, undefined, { timeout: 30000 });
check(r.isError && /went away/.test(txt(r)), `huge: ${JSON.stringify(r)}`);
let back = false;
for (let i = 0; i < 3000 && !back; i++) {
  r = await client.callTool({ name: 'h_ok', arguments: {} });
  if (!r.isError) back = true;
  else {
    check(/unavailable|went away|could not send/.test(txt(r)), `while restarting: ${txt(r)}`);
    await new Promise((ok) => setTimeout(ok, 10));
  }
}
check(back, 'the server did not come back after the huge message');
console.log('ok: hostile server survived');
await client.close();
process.exit(0);
