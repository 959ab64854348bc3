// http_line_server.mjs PORT - the HTTP floor: a trivial node:http server
// that answers initialize (with an Mcp-Session-Id), notifications (202),
// tools/list and tools/call of echo as JSON with the least work (read the
// body, parse, build the answer).  No validation, no sessions kept.
// Prints "listening" when ready.
import http from 'node:http';

const port = Number(process.argv[2] || 0);
const tool = { name: 'echo', description: 'echo',
  inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } };
const srv = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => {
    if (req.method !== 'POST') { res.writeHead(405).end(); return; }
    const m = JSON.parse(body);
    if (m.id === undefined) { res.writeHead(202).end(); return; }
    let result;
    const headers = { 'content-type': 'application/json' };
    if (m.method === 'initialize') {
      result = { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
                 serverInfo: { name: 'line-http', version: '1' } };
      headers['mcp-session-id'] = 'floor';
    } else if (m.method === 'tools/list') result = { tools: [tool] };
    else if (m.method === 'tools/call')
      result = { content: [{ type: 'text', text: m.params.arguments.text }], isError: false };
    else result = {};
    res.writeHead(200, headers).end(JSON.stringify({ jsonrpc: '2.0', id: m.id, result }));
  });
});
srv.keepAliveTimeout = 60000;
srv.listen(port, '127.0.0.1', () => console.log('listening'));
