// common.mjs - shared setup of the MCP interop scripts: the official MCP
// TypeScript SDK client (Client + StdioClientTransport) spawning
// `toolhost mcp -c CONFIG`.  Usage of a script: node X.mjs TOOLHOST CONFIG
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

export function fail(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}

export function check(cond, msg) {
  if (!cond) fail(msg);
}

export async function connect(extraArgs = [], capabilities = {}) {
  const [bin, config] = process.argv.slice(2);
  if (!bin || !config) fail('usage: node script.mjs TOOLHOST CONFIG');
  const transport = new StdioClientTransport({
    command: bin,
    args: ['mcp', '-c', config, ...extraArgs],
    stderr: 'inherit',
  });
  const client = new Client({ name: 'toolhost-tests', version: '1.0.0' },
                            { capabilities });
  await client.connect(transport);
  return { client, transport };
}

// Fails the script when it runs longer than ms.
export function deadline(ms) {
  const t = setTimeout(() => fail(`timed out after ${ms} ms`), ms);
  t.unref();
}
