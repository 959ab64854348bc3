// sdk_server.mjs - the SDK's own stdio MCP server with the same echo tool
// (a required string `text`, returned as one text block).
import { sdk, zod } from './sdk.mjs';

const { McpServer } = await sdk('server/mcp.js');
const { StdioServerTransport } = await sdk('server/stdio.js');
const { z } = await zod();

const server = new McpServer({ name: 'sdk-echo', version: '1.0.0' });
server.registerTool('echo', {
  description: 'Writes `text` to stdout unchanged.',
  inputSchema: { text: z.string().describe('The text to write to stdout.') },
  annotations: { readOnlyHint: true, idempotentHint: true },
}, async ({ text }) => ({ content: [{ type: 'text', text }] }));
await server.connect(new StdioServerTransport());
