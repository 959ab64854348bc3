// line_server.mjs - the floor: a trivial JSON-line server that answers
// initialize, tools/list and tools/call of echo with the least work (parse
// the line, build the answer, write it).  No validation, no schema.
import readline from 'node:readline';

const tool = { name: 'echo', description: 'echo',
  inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } };
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  let result;
  if (m.method === 'initialize')
    result = { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
               serverInfo: { name: 'line', version: '1' } };
  else if (m.method === 'tools/list') result = { tools: [tool] };
  else if (m.method === 'tools/call')
    result = { content: [{ type: 'text', text: m.params.arguments.text }], isError: false };
  else result = {};
  process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id, result }) + '\n');
});
