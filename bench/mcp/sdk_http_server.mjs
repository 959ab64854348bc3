// sdk_http_server.mjs PORT - the SDK's own Streamable HTTP server with the
// same echo tool as sdk_server.mjs: one McpServer and one
// StreamableHTTPServerTransport per session (the SDK's documented stateful
// pattern), on node:http at 127.0.0.1:PORT, path /mcp.  Answers as plain
// JSON (enableJsonResponse: the SDK's cheaper mode; toolhost answers a call
// without progress as JSON too).  Prints "listening" when ready.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { sdk, zod } from './sdk.mjs';

const { McpServer } = await sdk('server/mcp.js');
const { StreamableHTTPServerTransport } = await sdk('server/streamableHttp.js');
const { z } = await zod();

const port = Number(process.argv[2] || 0);
const transports = new Map();

function newServer() {
  const server = new McpServer({ name: 'sdk-echo-http', version: '1.0.0' });
  server.registerTool('echo', {
    description: 'Writes `text` to stdout unchanged.',
    inputSchema: { text: z.string().describe('The text to write to stdout.') },
    annotations: { readOnlyHint: true, idempotentHint: true },
  }, async ({ text }) => ({ content: [{ type: 'text', text }] }));
  return server;
}

const srv = http.createServer(async (req, res) => {
  try {
    let body = '';
    for await (const c of req) body += c;
    const parsed = body ? JSON.parse(body) : undefined;
    const sid = req.headers['mcp-session-id'];
    let t = sid ? transports.get(sid) : undefined;
    if (!t) {
      if (sid) { res.writeHead(404).end(); return; }
      t = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: true,
        onsessioninitialized: (id) => { transports.set(id, t); },
      });
      t.onclose = () => { if (t.sessionId) transports.delete(t.sessionId); };
      await newServer().connect(t);
    }
    await t.handleRequest(req, res, parsed);
  } catch (e) {
    if (!res.headersSent) res.writeHead(500).end(String(e));
  }
});
srv.keepAliveTimeout = 60000;
srv.listen(port, '127.0.0.1', () => console.log('listening'));
