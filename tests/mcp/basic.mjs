// basic.mjs - list, call, a missing parameter, Unicode, progress, cancel,
// 200 concurrent calls, a 10 MB output cut by the limits.
import { check, connect, deadline, fail } from './common.mjs';

deadline(60000);
const { client } = await connect();

const v = client.getServerVersion();
check(v && v.name === 'toolhost', `serverInfo: ${JSON.stringify(v)}`);

// tools/list
const { tools } = await client.listTools();
const names = tools.map((t) => t.name);
check(names.includes('echo') && names.includes('echo_async'),
      `tools/list lacks echo/echo_async: ${names}`);
check(!names.includes('get_running_tasks') && !names.includes('cancel_task'),
      'task tools must not be listed on MCP');
const echo = tools.find((t) => t.name === 'echo');
check(echo.inputSchema.type === 'object' &&
      echo.inputSchema.required.includes('text'), 'echo inputSchema');
check(echo.annotations.readOnlyHint === true, 'echo readOnlyHint');
const ea = tools.find((t) => t.name === 'echo_async');
check(ea.execution && ea.execution.taskSupport === 'optional',
      'echo_async taskSupport optional');

// tools/call
let r = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
check(!r.isError && r.content[0].type === 'text' &&
      r.content[0].text === 'hello', `echo: ${JSON.stringify(r)}`);

// Unicode round trip
const uni = 'héllo wörld ✓ 日本語 🚀 \u{1F600}';
r = await client.callTool({ name: 'echo', arguments: { text: uni } });
check(r.content[0].text === uni, `unicode: ${JSON.stringify(r.content)}`);

// A missing parameter: a tool error (isError), not a protocol error.
r = await client.callTool({ name: 'echo', arguments: {} });
check(r.isError === true && /text/.test(r.content[0].text),
      `missing param: ${JSON.stringify(r)}`);

// An unknown tool: a protocol error (-32602).
try {
  await client.callTool({ name: 'no_such_tool', arguments: {} });
  fail('unknown tool did not fail');
} catch (e) {
  check(e.code === -32602, `unknown tool code ${e.code}`);
}

// Progress
const seen = [];
r = await client.callTool(
  { name: 'echo_async', arguments: { text: 'done', steps: 4, delay_ms: 20 } },
  undefined, { onprogress: (p) => seen.push(p) });
check(r.content[0].text === 'done', `echo_async: ${JSON.stringify(r)}`);
// The acknowledgement is always one; the manager coalesces later updates
// and drops those the result overtakes, so how many more arrive depends on
// the scheduler (on a starved machine, none): at least one, increasing.
check(seen.length >= 1, `progress notifications: ${JSON.stringify(seen)}`);
for (let i = 1; i < seen.length; i++)
  check(seen[i].progress > seen[i - 1].progress,
        `progress not increasing: ${JSON.stringify(seen)}`);
check(seen.some((p) => p.total === 100 && p.message),
      `progress total/message: ${JSON.stringify(seen)}`);
// The first update (fraction 1/4) acknowledges the async call: its
// notification carries the fraction too, not a count.
check(seen[0].progress === 25 && seen[0].total === 100 &&
      seen[0].message === 'step 1/4',
      `first progress is not 25 of 100: ${JSON.stringify(seen)}`);

// Cancel: abort a long call after its first progress.
const ac = new AbortController();
const t0 = Date.now();
let progressed = false;
try {
  await client.callTool(
    { name: 'echo_async', arguments: { text: 'x', steps: 1000, delay_ms: 50 } },
    undefined,
    { signal: ac.signal,
      onprogress: () => { if (!progressed) { progressed = true; ac.abort('test'); } },
      timeout: 30000 });
  fail('the cancelled call returned a result');
} catch (e) {
  check(progressed, `cancel: no progress before ${e}`);
}
check(Date.now() - t0 < 10000, 'cancel took too long');
// The server still serves after the cancel.
r = await client.callTool({ name: 'echo', arguments: { text: 'after' } });
check(r.content[0].text === 'after', 'echo after cancel');

// 200 concurrent calls
const many = await Promise.all(Array.from({ length: 200 }, (_, i) =>
  client.callTool({ name: 'echo', arguments: { text: `n${i}` } })));
many.forEach((m, i) => check(!m.isError && m.content[0].text === `n${i}`,
                             `concurrent call ${i}: ${JSON.stringify(m)}`));

// A 10 MB output is cut by the limits (text: head and tail, a marker).
const big = 'x'.repeat(10 * 1024 * 1024);
r = await client.callTool({ name: 'echo', arguments: { text: big } },
                          undefined, { timeout: 30000 });
const out = r.content[0].text;
check(out.length < big.length && /cut/.test(out),
      `10 MB output not cut: ${out.length} chars`);
const meta = r._meta && r._meta['toolhost/meta'];
check(meta && meta.toolhost.output.stdout.truncated === true,
      `10 MB output meta: ${JSON.stringify(meta)}`);

await client.close();
console.log('basic: ok');
