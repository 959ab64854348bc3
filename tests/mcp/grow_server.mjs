// grow_server.mjs - an MCP server (stdio, newline-delimited JSON-RPC, no
// SDK) whose tool list changes, for the mcp plugin's re-listing
// (tests/integration/test_tools_changed.c).  argv[2] is a file holding a
// count N (missing: 0), kept across its restarts.  Its tools:
//   ok         answers "ok"
//   grow       adds one to N (a new tool grown_N), sends
//              notifications/tools/list_changed, answers "grew N"
//   same       sends notifications/tools/list_changed with nothing
//              changed, answers "same"
//   grown_K    (K = 1..N) answers "grown K"
// It also sends list_changed right after it is initialized, before any
// change (as server-everything does).
import { createInterface } from 'node:readline';
import { readFileSync, writeFileSync } from 'node:fs';

const file = process.argv[2];
const count = () => { try { return parseInt(readFileSync(file, 'utf8'), 10) || 0; }
                      catch { return 0; } };
const out = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const text = (id, t) => out({ jsonrpc: '2.0', id,
                              result: { content: [{ type: 'text', text: t }] } });
const changed = () => out({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' });
const obj = { type: 'object', properties: {} };
const tools = () => {
  const v = ['ok', 'grow', 'same'].map((name) => ({ name, description: `grow ${name}`,
                                                    inputSchema: obj }));
  for (let k = 1; k <= count(); k++)
    v.push({ name: `grown_${k}`, description: `grown tool ${k}`, inputSchema: obj });
  return v;
};

createInterface({ input: process.stdin }).on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.method === 'initialize')
    return out({ jsonrpc: '2.0', id: m.id, result: {
      protocolVersion: m.params.protocolVersion,
      capabilities: { tools: { listChanged: true } },
      serverInfo: { name: 'grow', version: '1' } } });
  if (m.method === 'notifications/initialized')
    return changed();
  if (m.method === 'tools/list') {
    // two pages when it can: the cursor must be followed
    const all = tools();
    if (!m.params || !m.params.cursor)
      return out({ jsonrpc: '2.0', id: m.id,
                   result: { tools: all.slice(0, 2), nextCursor: 'p2' } });
    return out({ jsonrpc: '2.0', id: m.id, result: { tools: all.slice(2) } });
  }
  if (m.method !== 'tools/call' || m.id === undefined) return;
  const name = m.params.name;
  if (name === 'ok') return text(m.id, 'ok');
  if (name === 'grow') {
    const n = count() + 1;
    writeFileSync(file, `${n}\n`);
    changed();
    return text(m.id, `grew ${n}`);
  }
  if (name === 'same') { changed(); return text(m.id, 'same'); }
  const g = /^grown_(\d+)$/.exec(name);
  if (g && +g[1] <= count()) return text(m.id, `grown ${g[1]}`);
  out({ jsonrpc: '2.0', id: m.id, error: { code: -32602, message: `no tool ${name}` } });
});
