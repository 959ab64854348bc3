// hostile_server.mjs - an MCP server (stdio, newline-delimited JSON-RPC,
// no SDK) that misbehaves on purpose, for the mcp plugin's tests
// (tests/integration/test_mcp_source.c, tests/mcp/hostile.mjs).  Its tools:
//   ok         answers "ok <n> cancelled <m> open <k>" (n: calls so far,
//              m: notifications/cancelled received for calls it had, k:
//              calls of 'silent' not cancelled yet)
//   flood      sends 20000 progress and log notifications, some for
//              unknown tokens, then answers
//   junk       writes lines that are not JSON-RPC, then answers
//   huge       writes one line of 2 MB (over the host's max_message)
//   silent     never answers
//   wrongid    answers an id nobody asked for first, then the right one
//   request    asks the host for sampling/createMessage and a ping, then
//              answers
//   whoami     "uid <uid> cwd <folder> env <names of its environment>"
//   deaf       never answers, and stops reading its stdin
//   later      answers "later", then 20 ms later asks the host for a ping
//              unasked (id "late<n>"); the host's answer makes it write
//              "pong late<n>" on its stderr (the host logs that line)
// and two it lies about: 'badschema' (a keyword that is not JSON Schema)
// and 'bad name!' (a name toolhost cannot carry as is).
import { createInterface } from 'node:readline';

let calls = 0, cancelled = 0;
const open = new Set(); // ids of calls not answered
const out = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const text = (id, t) => out({ jsonrpc: '2.0', id,
                              result: { content: [{ type: 'text', text: t }] } });
const obj = { type: 'object', properties: {} };
const tools = ['ok', 'flood', 'junk', 'huge', 'silent', 'wrongid', 'request',
               'whoami', 'deaf', 'later']
  .map((name) => ({ name, description: `hostile ${name}`, inputSchema: obj }));
tools.push({ name: 'badschema', description: 'lies about its schema',
             inputSchema: { type: 'object',
                            properties: { x: { type: 'string', frobnicate: 3 } } } });
tools.push({ name: 'bad name!', description: 'a name with a space',
             inputSchema: obj });
tools.push({ name: 'nul\u0000name', description: 'a NUL in its name',
             inputSchema: obj });

const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.method === 'initialize')
    return out({ jsonrpc: '2.0', id: m.id, result: {
      protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
      serverInfo: { name: 'hostile', version: '1' } } });
  if (m.method === 'tools/list') {
    // two pages: the cursor must be followed
    if (!m.params || !m.params.cursor)
      return out({ jsonrpc: '2.0', id: m.id,
                   result: { tools: tools.slice(0, 4), nextCursor: 'p2' } });
    return out({ jsonrpc: '2.0', id: m.id, result: { tools: tools.slice(4) } });
  }
  if (m.method === undefined && typeof m.id === 'string' &&
      m.id.startsWith('late')) {
    process.stderr.write(`pong ${m.id}\n`);
    return;
  }
  if (m.method === 'notifications/cancelled') {
    if (open.delete(m.params.requestId)) cancelled++;
    return;
  }
  if (m.method !== 'tools/call' || m.id === undefined) return;
  calls++;
  const token = m.params._meta && m.params._meta.progressToken;
  switch (m.params.name) {
  case 'ok': return text(m.id, `ok ${calls} cancelled ${cancelled} open ${open.size}`);
  case 'flood': {
    for (let i = 0; i < 20000; i++) {
      out({ jsonrpc: '2.0', method: 'notifications/progress',
            params: { progressToken: i % 2 ? token : 'nobody', progress: i,
                      total: 20000 } });
      out({ jsonrpc: '2.0', method: 'notifications/message',
            params: { level: 'info', data: 'x'.repeat(100) } });
    }
    return text(m.id, 'flooded');
  }
  case 'junk':
    process.stdout.write('this is not json\n[1,2,3]\n{"jsonrpc":"2.0"}\n');
    return text(m.id, 'junk sent');
  case 'huge':
    process.stdout.write('{"jsonrpc":"2.0","id":' + m.id +
                         ',"result":{"content":[{"type":"text","text":"' +
                         'y'.repeat(2 * 1024 * 1024) + '"}]}}\n');
    return;
  case 'silent': open.add(m.id); return;
  case 'deaf': // stays alive with nothing to read
    open.add(m.id); rl.pause(); process.stdin.pause(); setInterval(() => {}, 1 << 30); return;
  case 'whoami':
    return text(m.id, `uid ${process.getuid()} cwd ${process.cwd()} env ` +
                      Object.keys(process.env).sort().join(','));
  case 'wrongid':
    text(m.id + 100000, 'not for you');
    return text(m.id, 'right id');
  case 'request':
    out({ jsonrpc: '2.0', id: 'r1', method: 'sampling/createMessage',
          params: { messages: [], maxTokens: 1 } });
    out({ jsonrpc: '2.0', id: 'r2', method: 'ping' });
    return text(m.id, 'asked');
  case 'later':
    setTimeout(() => out({ jsonrpc: '2.0', id: `late${m.id}`,
                           method: 'ping' }), 20);
    return text(m.id, 'later');
  default:
    return out({ jsonrpc: '2.0', id: m.id,
                 error: { code: -32602, message: `unknown tool ${m.params.name}` } });
  }
});
