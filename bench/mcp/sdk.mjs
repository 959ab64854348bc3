// sdk.mjs - where the MCP TypeScript SDK is (tests/mcp/node_modules, pinned
// by tests/mcp/package-lock.json; `npm ci` there).
import { fileURLToPath, pathToFileURL } from 'node:url';
import path from 'node:path';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const nm = path.join(root, 'tests/mcp/node_modules');
export const sdk = (p) => import(pathToFileURL(path.join(nm, '@modelcontextprotocol/sdk/dist/esm', p)).href);
export const zod = () => import(pathToFileURL(path.join(nm, 'zod/index.js')).href);
