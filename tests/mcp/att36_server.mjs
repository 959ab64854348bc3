// att36_server.mjs - an MCP server (stdio, newline-delimited JSON-RPC, no
// SDK) for tests/integration/test_att36.c: it writes its answers in the
// ways that stress the busy polling of the mcp plugin (a caller reading
// the server's output for a moment, the reader parked meanwhile).  Tools:
//   ok         answers "ok <n>" (n: calls so far)
//   half       writes half of its answer line, the rest 30 ms later
//   tiny       writes its answer 3 bytes at a time, one write per tick
//   crlf       answers with a line that ends in CR LF
//   progress   5,000 progress notifications for the call, then answers
//   pingstall  stops reading its stdin, asks the host for 3,000 pings
//              (whose answers fill its stdin), creates 'flag'.pinged,
//              waits until the file named by its argument 'flag'
//              exists, then reads again and
//              answers "stalled <pongs so far>"
//   changed    answers, then (10 ms later) lists one tool more ('added')
//              and says so (notifications/tools/list_changed); the
//              file "changed" in the folder of its first argument keeps
//              that across restarts (the host's reload starts it anew)
//   ask        answers, then (20 ms later, no call in flight) asks the
//              host for a ping, roots/list and sampling/createMessage;
//              each answer is written to its stderr ("answer ask-ping
//              ok", "answer ask-roots error") and the host logs it
//   logflood   answers, then writes 100,000 log notifications
//   errflood   writes 1 MB on its stderr, then answers
//   exit       exits (status 3) without answering
//   huge       answers with a line of 2 MB (over max_message)
//   silent     never answers (stderr: "cancelled <id>" when told)
//   wrongid    answers an id nobody asked for first, then the right one
//   slow       answers "slow" 30 ms later
//   added      (listed after 'changed') answers "added"
import { existsSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

let calls = 0, pongs = 0;
const state = process.argv[2] ? `${process.argv[2]}/changed` : null;
let changed = state !== null && existsSync(state);
// a line written in parts (half, tiny) holds every other line back
// until its end, so that lines never mix
let holding = false;
const held = [];
const raw = (t) => (holding ? held.push(t) : process.stdout.write(t));
const hold = () => { holding = true; };
const release = () => {
  holding = false;
  while (!holding && held.length) process.stdout.write(held.shift());
};
const out = (m) => raw(JSON.stringify(m) + '\n');
const answer = (id, t) => ({ jsonrpc: '2.0', id,
                             result: { content: [{ type: 'text', text: t }] } });
const text = (id, t) => out(answer(id, t));
const obj = { type: 'object', properties: {} };
const names = ['ok', 'half', 'tiny', 'crlf', 'progress', 'pingstall',
               'changed', 'ask', 'logflood', 'errflood', 'exit', 'huge',
               'silent', 'wrongid', 'slow'];
const list = () => names.concat(changed ? ['added'] : [])
  .map((name) => ({ name, description: `att36 ${name}`,
                    inputSchema: name === 'pingstall'
                      ? { type: 'object', properties: { flag: { type: 'string' } } }
                      : obj }));

// made beforehand: they leave as soon as the call comes
let stallPings = '';
for (let i = 0; i < 3000; i++)
  stallPings += JSON.stringify({ jsonrpc: '2.0', id: `stall${i}`,
                                 method: 'ping' }) + '\n';

const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.method === 'initialize')
    return out({ jsonrpc: '2.0', id: m.id, result: {
      protocolVersion: m.params.protocolVersion,
      capabilities: { tools: { listChanged: true } },
      serverInfo: { name: 'att36', version: '1' } } });
  if (m.method === 'tools/list')
    return out({ jsonrpc: '2.0', id: m.id, result: { tools: list() } });
  if (m.method === undefined && typeof m.id === 'string') {
    // an answer to one of our requests
    if (m.id.startsWith('stall')) { pongs++; return; }
    process.stderr.write(`answer ${m.id} ${m.error ? 'error' : 'ok'}\n`);
    return;
  }
  if (m.method === 'notifications/cancelled') {
    process.stderr.write(`cancelled ${m.params.requestId}\n`);
    return;
  }
  if (m.method !== 'tools/call' || m.id === undefined) return;
  calls++;
  const token = m.params._meta && m.params._meta.progressToken;
  switch (m.params.name) {
  case 'ok': return text(m.id, `ok ${calls}`);
  case 'half': {
    const l = JSON.stringify(answer(m.id, 'half')) + '\n';
    if (holding) return raw(l); // another is being split
    hold();
    process.stdout.write(l.slice(0, 20));
    setTimeout(() => { process.stdout.write(l.slice(20)); release(); }, 30);
    return;
  }
  case 'tiny': {
    const l = JSON.stringify(answer(m.id, 'tiny')) + '\n';
    if (holding) return raw(l);
    hold();
    let at = 0;
    const next = () => {
      process.stdout.write(l.slice(at, at + 3));
      at += 3;
      if (at < l.length) setImmediate(next);
      else release();
    };
    return next();
  }
  case 'crlf':
    raw(JSON.stringify(answer(m.id, 'crlf')) + '\r\n');
    return;
  case 'progress':
    for (let i = 0; i < 5000; i++)
      out({ jsonrpc: '2.0', method: 'notifications/progress',
            params: { progressToken: token === undefined ? 'none' : token,
                      progress: i, total: 5000 } });
    return text(m.id, 'progressed');
  case 'pingstall': {
    rl.pause();
    process.stdin.pause();
    raw(stallPings); // one write: read in one go
    const flag = m.params.arguments && m.params.arguments.flag;
    if (flag) writeFileSync(`${flag}.pinged`, ''); // the test waits for it
    const t = setInterval(() => {
      if (!flag || !existsSync(flag)) return;
      clearInterval(t);
      rl.resume();
      process.stdin.resume();
      // the pongs still in the pipe come first
      setTimeout(() => text(m.id, `stalled ${pongs}`), 50);
    }, 5);
    return;
  }
  case 'changed':
    text(m.id, 'changed');
    setTimeout(() => {
      changed = true;
      if (state) writeFileSync(state, '');
      out({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' });
    }, 10);
    return;
  case 'ask':
    text(m.id, 'ask');
    setTimeout(() => {
      out({ jsonrpc: '2.0', id: 'ask-ping', method: 'ping' });
      out({ jsonrpc: '2.0', id: 'ask-roots', method: 'roots/list' });
      out({ jsonrpc: '2.0', id: 'ask-sampling',
            method: 'sampling/createMessage',
            params: { messages: [], maxTokens: 1 } });
    }, 20);
    return;
  case 'logflood': {
    text(m.id, 'flooding');
    const n = { jsonrpc: '2.0', method: 'notifications/message',
                params: { level: 'info', data: 'z'.repeat(60) } };
    const l = JSON.stringify(n) + '\n';
    let left = 100000;
    // in writes of 1,000 lines; each waits until the last drained
    const more = () => {
      while (left > 0) {
        left -= 1000;
        if (!raw(l.repeat(1000))) {
          process.stdout.once('drain', more);
          return;
        }
      }
      process.stderr.write('logflood done\n');
    };
    setImmediate(more);
    return;
  }
  case 'errflood':
    process.stderr.write(('e'.repeat(99) + '\n').repeat(10000));
    return text(m.id, 'errflooded');
  case 'exit':
    process.exit(3);
    return;
  case 'huge':
    raw('{"jsonrpc":"2.0","id":' + m.id +
                         ',"result":{"content":[{"type":"text","text":"' +
                         'y'.repeat(2 * 1024 * 1024) + '"}]}}\n');
    return;
  case 'silent': return;
  case 'wrongid':
    text(m.id + 100000, 'not for you');
    return text(m.id, 'right id');
  case 'slow':
    setTimeout(() => text(m.id, 'slow'), 30);
    return;
  case 'added': return text(m.id, 'added');
  default:
    return out({ jsonrpc: '2.0', id: m.id,
                 error: { code: -32602, message: `unknown tool ${m.params.name}` } });
  }
});
