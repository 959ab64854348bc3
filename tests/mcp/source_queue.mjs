// source_queue.mjs - the mcp plugin's calls of a stdio server never wait
// in execute() (the front's own thread may run them): a call past
// max_concurrency waits for a slot with the server's reader, in order (at
// most max_waiting of them, the next refused), and one cancelled there
// never reaches the server; a server that stops
// reading its stdin holds neither the front nor the other calls' answers
// until write_timeout kills it.  Against tests/mcp/hostile_server.mjs.
// Usage: node source_queue.mjs TOOLHOST CONFIG queue|deaf
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { check, deadline, fail } from './common.mjs';

const [bin, config, phase] = process.argv.slice(2);
if (!bin || !config || !phase) fail('usage: node source_queue.mjs TOOLHOST CONFIG queue|deaf');
const vg = process.env.TH_VALGRIND;
deadline(vg ? 500000 : 120000);
const transport = new StdioClientTransport(vg
  ? { command: '/bin/sh', args: ['-c', `exec ${vg} "$0" "$@"`, bin, 'mcp', '-c', config],
      stderr: 'inherit' }
  : { command: bin, args: ['mcp', '-c', config], stderr: 'inherit' });
const client = new Client({ name: 'toolhost-tests', version: '1.0.0' }, { capabilities: {} });
await client.connect(transport);
const txt = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
const LONG = { timeout: 600000 };

if (phase === 'queue') {
  // max_concurrency 1: A holds the slot until its client cancels it
  const aa = new AbortController();
  const a = client.callTool({ name: 'h_silent', arguments: {} }, undefined,
                            { ...LONG, signal: aa.signal });
  const b = client.callTool({ name: 'h_ok', arguments: {} }, undefined, LONG);
  const ac = new AbortController();
  const c = client.callTool({ name: 'h_ok', arguments: {} }, undefined,
                            { ...LONG, signal: ac.signal });
  // max_waiting 2: B and C wait, E is refused at once
  const re = await client.callTool({ name: 'h_ok', arguments: {} }, undefined, LONG);
  check(re.isError && /server 'h' is busy: max_concurrency \(1\) calls in flight and max_waiting \(2\) waiting/.test(txt(re)),
        `past max_waiting: ${JSON.stringify(re)}`);
  // the front reads requests in order: once the ping is answered, A, B and
  // C have been started (B and C wait for the slot)
  await client.ping();
  ac.abort('cancelled while waiting for a slot');
  await c.then(() => fail('the cancelled call answered'), () => {});
  aa.abort('the slot is needed');
  await a.then(() => fail('the cancelled silent call answered'), () => {});
  // B got the slot after A ended, and the server heard of A's end first;
  // C never reached it (B is its 2nd call, the next one its 3rd)
  const rb = await b;
  check(!rb.isError && txt(rb) === 'ok 2 cancelled 1 open 0', `waiting call: ${JSON.stringify(rb)}`);
  const rd = await client.callTool({ name: 'h_ok', arguments: {} });
  check(!rd.isError && txt(rd) === 'ok 3 cancelled 1 open 0',
        `after the cancelled wait: ${JSON.stringify(rd)}`);
  console.log('ok: calls past max_concurrency wait in order; a cancelled one is never sent');
} else if (phase === 'deaf') {
  const deaf = client.callTool({ name: 'h_deaf', arguments: {} }, undefined, LONG);
  // more than the socket to the server holds: some requests wait for room
  const pad = 'x'.repeat(256 * 1024);
  let pinged = false;
  const order = [];
  const big = [];
  const send = () =>
    big.push(client.callTool({ name: 'h_ok', arguments: { pad } }, undefined, LONG)
      .then((r) => { order.push(pinged); return r; }));
  for (let i = 0; i < 8; i++)
    send();
  // the front still reads and answers while the server does not read:
  // once the first ping is answered, the reader waits to write to the
  // server; one more call is started, and the next ping is answered
  // before any of these calls ends
  await client.ping();
  send();
  await client.ping();
  pinged = true;
  const rs = await Promise.all(big);
  check(order.length === 9 && !order.includes(false),
        `a call of the deaf server was answered before the ping: ${order}`);
  for (const r of rs)
    check(r.isError && /went away|could not be sent|unavailable/.test(txt(r)),
          `a call to the deaf server: ${JSON.stringify(r).slice(0, 300)}`);
  const rd = await deaf;
  check(rd.isError && /went away/.test(txt(rd)), `deaf: ${JSON.stringify(rd)}`);
  // killed after write_timeout and restarted: it answers again
  let back = false;
  for (let i = 0; i < 3000 && !back; i++) {
    const r = await client.callTool({ name: 'h_ok', arguments: {} });
    if (!r.isError) back = true;
    else await new Promise((ok) => setTimeout(ok, 10));
  }
  check(back, 'the server did not come back after it stopped reading');
  console.log('ok: a server that stops reading holds no thread of the front');
} else {
  fail(`unknown phase ${phase}`);
}
await client.close();
process.exit(0);
