// v2.mjs - protocol revision 2026-07-28 with the official v2 client
// (@modelcontextprotocol/client, pinned in package.json): its connect()
// pinned to 2026-07-28 sends server/discover (no initialize) and every
// request after it with the per-request _meta envelope.  Driven by
// tests/integration/test_mcp_rev0728.c:
//
//   node v2.mjs stdio TOOLHOST CONFIG    `toolhost mcp -c CONFIG`
//   node v2.mjs http URL TOKEN           `toolhost serve`'s http:// entry
//
// The config serves echo.so, conform_tools.so and abi11_tools.so.  The
// script checks discover, tools/list, a text and a structured call,
// progress, a cancel, a resource read, a prompt, a completion, then an
// `auto` client (discover, then 2026-07-28 as well); exits 0 when all
// passed, 1 with FAIL: ... on stderr.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

function fail(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}
function check(cond, msg) {
  if (!cond) fail(msg);
}
const [mode, a, b] = process.argv.slice(2);
if (!['stdio', 'http'].includes(mode) || !a || !b) {
  console.error('usage: node v2.mjs stdio TOOLHOST CONFIG | http URL TOKEN');
  process.exit(2);
}
const budget = 60000 * Number(process.env.TH_TEST_SCALE || 1);
setTimeout(() => fail(`timed out after ${budget} ms`), budget).unref();

function transport() {
  if (mode === 'stdio')
    return new StdioClientTransport({ command: a, args: ['mcp', '-c', b],
                                      stderr: 'inherit' });
  return new StreamableHTTPClientTransport(new URL(a), {
    requestInit: { headers: { Authorization: `Bearer ${b}` } },
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 100,
                           maxReconnectionDelay: 100, reconnectionDelayGrowFactor: 1 },
  });
}

async function connect(negotiation) {
  const client = new Client({ name: 'toolhost-v2-test', version: '1.0.0' },
                            { capabilities: {}, versionNegotiation: negotiation });
  client.onerror = () => {};
  await client.connect(transport());
  return client;
}

const client = await connect({ mode: { pin: '2026-07-28' } });
check(client.getProtocolEra() === 'modern' &&
      client.getNegotiatedProtocolVersion() === '2026-07-28',
      `era ${client.getProtocolEra()} ${client.getNegotiatedProtocolVersion()}`);
const disc = client.getDiscoverResult();
check(disc && disc.supportedVersions[0] === '2026-07-28' &&
      disc.supportedVersions.includes('2025-11-25') &&
      disc.supportedVersions.includes('2024-11-05'),
      `discover: ${JSON.stringify(disc)}`);
const caps = client.getServerCapabilities();
check(caps && caps.tools && caps.resources && caps.prompts && caps.completions &&
      caps.logging && !caps.tasks, `capabilities: ${JSON.stringify(caps)}`);
check(/toolhost/.test(client.getInstructions() || ''),
      `instructions: ${client.getInstructions()}`);

// tools/list: the 2026-07-28 tool shape (no execution).
const { tools } = await client.listTools();
const names = tools.map((t) => t.name);
for (const n of ['echo', 'echo_async', 'abi11_tools_rows', 'test_simple_text'])
  check(names.includes(n), `tools/list lacks ${n}: ${names}`);
check(tools.every((t) => !('execution' in t)), 'a tool with execution');

// A text result and a structured one.
let r = await client.callTool({ name: 'echo', arguments: { text: 'héllo v2' } });
check(!r.isError && r.content[0].text === 'héllo v2', `echo: ${JSON.stringify(r)}`);
r = await client.callTool({ name: 'abi11_tools_rows', arguments: { limit: 3 } });
check(!r.isError && r.structuredContent && r.structuredContent.rows === 3,
      `structured: ${JSON.stringify(r)}`);
r = await client.callTool({ name: 'echo', arguments: {} });
check(r.isError === true && /text/.test(r.content[0].text),
      `a missing argument: ${JSON.stringify(r)}`);

// Progress.
const seen = [];
r = await client.callTool(
  { name: 'echo_async', arguments: { text: 'done', steps: 4, delay_ms: 20 } },
  { onprogress: (p) => seen.push(p) });
check(r.content[0].text === 'done', `echo_async: ${JSON.stringify(r)}`);
check(seen.length >= 1 && seen[0].progress === 25 && seen[0].total === 100,
      `progress: ${JSON.stringify(seen)}`);

// Cancel after the first progress: the call ends without a result.
const ac = new AbortController();
let progressed = false;
try {
  await client.callTool(
    { name: 'echo_async', arguments: { text: 'x', steps: 1000, delay_ms: 50 } },
    { signal: ac.signal, timeout: budget,
      onprogress: () => { if (!progressed) { progressed = true; ac.abort('test'); } } });
  fail('the cancelled call returned a result');
} catch (e) {
  check(progressed, `cancel: no progress before ${e}`);
}
r = await client.callTool({ name: 'echo', arguments: { text: 'after' } });
check(r.content[0].text === 'after', `echo after the cancel: ${JSON.stringify(r)}`);

// Resources, prompts, completion.
const { resources } = await client.listResources();
check(resources.some((x) => x.uri === 'test://static-text'),
      `resources/list: ${JSON.stringify(resources)}`);
let rr = await client.readResource({ uri: 'test://static-text' });
check(rr.contents[0].text === 'This is the content of the static text resource.',
      `read: ${JSON.stringify(rr)}`);
try {
  await client.readResource({ uri: 'test://no-such' });
  fail('an unknown URI was read');
} catch (e) {
  check(e.code === -32602, `unknown URI: code ${e.code} ${e.message}`);
}
const p = await client.getPrompt({ name: 'test_prompt_with_arguments',
                                   arguments: { arg1: 'a1', arg2: 'b2' } });
check(p.messages[0].content.text === "Prompt with arguments: arg1='a1', arg2='b2'",
      `prompt: ${JSON.stringify(p)}`);
const c = await client.complete({ ref: { type: 'ref/prompt', name: 'test_prompt_with_arguments' },
                                  argument: { name: 'arg1', value: 'par' } });
check(JSON.stringify(c.completion.values) === '["paris","park","party"]',
      `complete: ${JSON.stringify(c)}`);
await client.close();

// An `auto` client: server/discover finds 2026-07-28 here too.
const auto = await connect({ mode: 'auto' });
check(auto.getProtocolEra() === 'modern', `auto: era ${auto.getProtocolEra()}`);
r = await auto.callTool({ name: 'echo', arguments: { text: 'auto' } });
check(r.content[0].text === 'auto', `auto echo: ${JSON.stringify(r)}`);
await auto.close();

console.log(`v2 ${mode}: ok`);
process.exit(0);
