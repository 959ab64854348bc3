// v2.mjs - protocol revision 2026-07-28 with the official v2 client
// (@modelcontextprotocol/client, pinned in package.json): its connect()
// pinned to 2026-07-28 sends server/discover (no initialize) and every
// request after it with the per-request _meta envelope.  Driven by
// tests/integration/test_mcp_rev0728.c:
//
//   node v2.mjs stdio TOOLHOST CONFIG    `toolhost mcp -c CONFIG`
//   node v2.mjs http URL TOKEN CONFIG PID  `toolhost serve`'s http:// entry
//                                        (CONFIG and PID: its config file
//                                        and process, for the reload)
//
// The config serves echo.so, conform_tools.so, abi11_tools.so and
// abi14_calls.so, and reloads on SIGHUP.  The script checks discover,
// tools/list, a text and a structured call, progress, a cancel, a resource
// read, a prompt, a completion, then an `auto` client (discover, then
// 2026-07-28 as well), then input_required (a tool asking sampling, a
// form, and a form twice: two rounds) answered by the client's handlers,
// then subscriptions/listen: abi11_tools leaves CONFIG, SIGHUP, and the
// listen hears notifications/tools/list_changed.  The script edits CONFIG.
// Exits 0 when all passed, 1 with FAIL: ... on stderr.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { readFileSync, writeFileSync } from 'node:fs';

function fail(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}
function check(cond, msg) {
  if (!cond) fail(msg);
}
const [mode, a, b, httpConfig, httpPid] = process.argv.slice(2);
if (!['stdio', 'http'].includes(mode) || !a || !b ||
    (mode === 'http' && (!httpConfig || !httpPid))) {
  console.error('usage: node v2.mjs stdio TOOLHOST CONFIG | http URL TOKEN CONFIG PID');
  process.exit(2);
}
const budget = 60000 * Number(process.env.TH_TEST_SCALE || 1);
setTimeout(() => fail(`timed out after ${budget} ms`), budget).unref();

let stdioPid;
function transport() {
  if (mode === 'stdio') {
    const t = new StdioClientTransport({ command: a, args: ['mcp', '-c', b],
                                         stderr: 'inherit' });
    const start = t.start.bind(t);
    t.start = async () => { await start(); stdioPid = t.pid; };
    return t;
  }
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
// A client that declares neither sampling nor forms is not asked.
r = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'x' } });
check(r.isError === true && /cannot answer sampling/.test(r.content[0].text),
      `sampling without the capability: ${JSON.stringify(r)}`);
await client.close();

// An `auto` client: server/discover finds 2026-07-28 here too.
const auto = await connect({ mode: 'auto' });
check(auto.getProtocolEra() === 'modern', `auto: era ${auto.getProtocolEra()}`);
r = await auto.callTool({ name: 'echo', arguments: { text: 'auto' } });
check(r.content[0].text === 'auto', `auto echo: ${JSON.stringify(r)}`);
await auto.close();

// input_required: the tool's questions come back in the result; the
// client's handlers answer them and the client sends the call again.
const asks = [];
const asker = new Client({ name: 'toolhost-v2-asker', version: '1.0.0' },
                         { capabilities: { sampling: {}, elicitation: { form: {} } },
                           versionNegotiation: { mode: { pin: '2026-07-28' } } });
asker.onerror = () => {};
asker.setRequestHandler('sampling/createMessage', async (req) => {
  const text = req.params.messages[0].content.text;
  asks.push(`sampling:${text}`);
  return { role: 'assistant', model: 'v2-test-model',
           content: { type: 'text', text: `sampled ${text}` } };
});
asker.setRequestHandler('elicitation/create', async (req) => {
  asks.push(`form:${req.params.message}`);
  return { action: 'accept', content: { username: 'ada', email: 'ada@example.org' } };
});
await asker.connect(transport());
r = await asker.callTool({ name: 'test_sampling', arguments: { prompt: 'two and two?' } });
check(!r.isError && /^LLM response: .*sampled two and two\?/.test(r.content[0].text) &&
      /v2-test-model/.test(r.content[0].text), `sampling: ${JSON.stringify(r)}`);
r = await asker.callTool({ name: 'test_elicitation', arguments: { message: 'who?' } });
check(!r.isError && /^User response: .*"username":"ada"/.test(r.content[0].text),
      `form: ${JSON.stringify(r)}`);
// Two asks in one call: two rounds, the first answer kept for the second.
const form = JSON.stringify({ message: 'again?', requestedSchema: {
  type: 'object', properties: { username: { type: 'string' } } } });
r = await asker.callTool({ name: 'abi14_calls_ask',
                           arguments: { kind: 2, request: form, times: 2 } });
check(!r.isError && /^ok=2 rc=0 answer=.*ada/.test(r.content[0].text),
      `two asks: ${JSON.stringify(r)}`);
check(JSON.stringify(asks) === JSON.stringify(
  ['sampling:two and two?', 'form:who?', 'form:again?', 'form:again?']),
      `asks: ${JSON.stringify(asks)}`);

// subscriptions/listen: a reload that changes the tools reaches it.
const changed = [];
asker.setNotificationHandler('notifications/tools/list_changed',
                             (n) => changed.push(n));
const sub = await asker.listen({ toolsListChanged: true, promptsListChanged: true });
check(sub.honoredFilter.toolsListChanged === true && !sub.honoredFilter.promptsListChanged,
      `honoured: ${JSON.stringify(sub.honoredFilter)}`);
const cfgPath = mode === 'stdio' ? b : httpConfig;
const pid = mode === 'stdio' ? stdioPid : Number(httpPid);
check(pid > 0, `no server pid (${pid})`);
const cfgText = readFileSync(cfgPath, 'utf8');
const cut = cfgText.replace(/ *- name: abi11_tools\n *path: [^\n]*\n/, '');
check(cut !== cfgText, 'the config has no abi11_tools to take out');
writeFileSync(cfgPath, cut);
process.kill(pid, 'SIGHUP');
await new Promise((resolve) => {
  const poll = () => (changed.length ? resolve() : setTimeout(poll, 20));
  poll();
});
const left = (await asker.listTools()).tools.map((t) => t.name);
check(!left.includes('abi11_tools_rows') && left.includes('echo'),
      `tools after the reload: ${left}`);
await sub.close();
r = await asker.callTool({ name: 'echo', arguments: { text: 'after listen' } });
check(r.content[0].text === 'after listen', `echo after listen: ${JSON.stringify(r)}`);
await asker.close();

console.log(`v2 ${mode}: ok`);
process.exit(0);
