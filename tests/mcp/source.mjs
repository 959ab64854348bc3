// source.mjs - the mcp plugin (MCP servers as a tool source) driven through
// toolhost's MCP front by the official SDK client: server-everything
// (prefix ev_), server-filesystem on a temp folder (fs_) and toolhost
// behind toolhost (th_).  Lists the imported tools with their schemas,
// calls echo, get-sum, the structured-output tool, content of every kind,
// a long-running tool with progress, cancels one, reads and lists files,
// then kills server-everything and sees its tools answer 'unavailable'
// until it is back.  Usage: node source.mjs TOOLHOST CONFIG DIR
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { check, deadline, fail } from './common.mjs';

// `toolhost mcp -c CONFIG`, under valgrind when TH_VALGRIND holds its
// command line (make valgrind; the test reads valgrind's report on stderr)
async function connect() {
  const [bin, config] = process.argv.slice(2);
  if (!bin || !config) fail('usage: node script.mjs TOOLHOST CONFIG ...');
  const vg = process.env.TH_VALGRIND;
  const transport = new StdioClientTransport(vg
    ? { command: '/bin/sh', args: ['-c', `exec ${vg} "$0" "$@"`, bin, 'mcp', '-c', config],
        stderr: 'inherit' }
    : { command: bin, args: ['mcp', '-c', config], stderr: 'inherit' });
  const client = new Client({ name: 'toolhost-tests', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  return { client, transport };
}

deadline(process.env.TH_VALGRIND ? 400000 : 100000);
const dir = process.argv[4];
if (!dir) fail('usage: node source.mjs TOOLHOST CONFIG DIR');
const { client } = await connect();
const meta = (r) => (r._meta && r._meta['toolhost/meta']) || {};
const txt = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

// tools/list: names with the prefixes, schemas and annotations kept
const { tools } = await client.listTools();
const byName = new Map(tools.map((t) => [t.name, t]));
for (const n of ['ev_echo', 'ev_get-sum', 'ev_get-structured-content',
                 'ev_trigger-long-running-operation', 'ev_get-tiny-image',
                 'fs_read_text_file', 'fs_list_directory', 'th_echo'])
  check(byName.has(n), `tools/list lacks ${n}: ${[...byName.keys()]}`);
const echo = byName.get('ev_echo');
check(echo.inputSchema.type === 'object' &&
      echo.inputSchema.properties.message.type === 'string' &&
      echo.inputSchema.required.includes('message'),
      `ev_echo inputSchema: ${JSON.stringify(echo.inputSchema)}`);
check(echo.description === 'Echoes back the input string',
      `ev_echo description: ${echo.description}`);
check(echo.title === 'Echo Tool', `ev_echo title: ${echo.title}`);
check(echo.annotations && echo.annotations.readOnlyHint === true,
      `ev_echo annotations: ${JSON.stringify(echo.annotations)}`);
const sc = byName.get('ev_get-structured-content');
check(sc.outputSchema && sc.outputSchema.type === 'object',
      `structured tool has no outputSchema: ${JSON.stringify(sc)}`);

// calls
let r = await client.callTool({ name: 'ev_echo', arguments: { message: 'héllo ✓' } });
check(!r.isError && txt(r) === 'Echo: héllo ✓', `ev_echo: ${JSON.stringify(r)}`);
const pid1 = meta(r).server_pid;
check(Number.isInteger(pid1) && pid1 > 0, `no server_pid in meta: ${JSON.stringify(r)}`);

r = await client.callTool({ name: 'ev_get-sum', arguments: { a: 2, b: 40 } });
check(!r.isError && /42/.test(txt(r)), `ev_get-sum: ${JSON.stringify(r)}`);

// the arguments reach the server as they were sent (the tools/call line
// is written straight from msgpack: every escape, code points past the
// BMP, an empty string, reals and large integers)
const odd = 'q"b\\s/\n\t\r\u0001\u001f\u007f\u0000 é ✓ 😀 \u2028 end';
r = await client.callTool({ name: 'ev_echo', arguments: { message: odd } });
check(!r.isError && txt(r) === `Echo: ${odd}`, `ev_echo of odd text: ${JSON.stringify(r)}`);
r = await client.callTool({ name: 'ev_echo', arguments: { message: '' } });
check(!r.isError && txt(r) === 'Echo: ', `ev_echo of '': ${JSON.stringify(r)}`);
r = await client.callTool({ name: 'ev_get-sum', arguments: { a: 0.25, b: -1234567890123 } });
check(!r.isError && /-1234567890122\.75/.test(txt(r)), `ev_get-sum of a real: ${JSON.stringify(r)}`);

// the host validates against the imported schema: a missing argument
r = await client.callTool({ name: 'ev_get-sum', arguments: { a: 2 } });
check(r.isError && /b/.test(txt(r)), `missing b: ${JSON.stringify(r)}`);

r = await client.callTool({ name: 'ev_get-structured-content',
                            arguments: { location: 'Chicago' } });
check(!r.isError && r.structuredContent &&
      typeof r.structuredContent.temperature === 'number',
      `structured: ${JSON.stringify(r)}`);

r = await client.callTool({ name: 'ev_get-tiny-image', arguments: {} });
const img = r.content.find((c) => c.type === 'image');
check(!r.isError && img && img.mimeType === 'image/png' && img.data.length > 100,
      `image: ${JSON.stringify(r).slice(0, 400)}`);

r = await client.callTool({ name: 'ev_get-resource-links', arguments: { count: 2 } });
check(!r.isError && r.content.filter((c) => c.type === 'resource_link').length === 2,
      `resource links: ${JSON.stringify(r).slice(0, 600)}`);

r = await client.callTool({ name: 'ev_get-resource-reference',
                            arguments: { resourceType: 'Text', resourceId: 1 } });
const res = r.content.find((c) => c.type === 'resource');
check(!r.isError && res && res.resource.uri && typeof res.resource.text === 'string',
      `embedded resource: ${JSON.stringify(r).slice(0, 600)}`);

// progress from the server reaches our client
const seen = [];
r = await client.callTool(
  { name: 'ev_trigger-long-running-operation', arguments: { duration: 1, steps: 4 } },
  undefined, { onprogress: (p) => seen.push(p), timeout: 30000 });
check(!r.isError && /completed/i.test(txt(r)), `long-running: ${JSON.stringify(r)}`);
check(seen.length >= 1, `no progress notification: ${JSON.stringify(seen)}`);

// cancel a long one after its first progress; the server keeps serving
const ac = new AbortController();
let progressed = false;
try {
  await client.callTool(
    { name: 'ev_trigger-long-running-operation', arguments: { duration: 60, steps: 60 } },
    undefined,
    { signal: ac.signal, timeout: 30000,
      onprogress: () => { if (!progressed) { progressed = true; ac.abort('test'); } } });
  fail('the cancelled call answered');
} catch (e) {
  check(progressed, `cancel: failed before any progress: ${e}`);
}
r = await client.callTool({ name: 'ev_echo', arguments: { message: 'after cancel' } });
check(txt(r) === 'Echo: after cancel', `after cancel: ${JSON.stringify(r)}`);

// server-filesystem on DIR
r = await client.callTool({ name: 'fs_read_text_file', arguments: { path: `${dir}/hello.txt` } });
check(!r.isError && txt(r).includes('hello from toolhost'), `fs read: ${JSON.stringify(r)}`);
r = await client.callTool({ name: 'fs_list_directory', arguments: { path: dir } });
check(!r.isError && txt(r).includes('hello.txt'), `fs list: ${JSON.stringify(r)}`);
r = await client.callTool({ name: 'fs_read_text_file', arguments: { path: '/etc/passwd' } });
check(r.isError && /denied|outside|not allowed/i.test(txt(r)),
      `fs outside its root: ${JSON.stringify(r)}`);

// toolhost behind toolhost
r = await client.callTool({ name: 'th_echo', arguments: { text: 'inner' } });
check(!r.isError && txt(r) === 'inner', `th_echo: ${JSON.stringify(r)}`);

// crash: kill server-everything; its tools answer 'unavailable' until
// the restart (restart_initial in the config), then work again
process.kill(pid1, 'SIGKILL');
let unavailable = null, back = null, retryHint = null;
for (let i = 0; i < 4000 && !back; i++) {
  r = await client.callTool({ name: 'ev_echo', arguments: { message: 'again' } });
  if (r.isError) {
    // ABI 1.5: the host's code, not the tool's failure (down, or went
    // away during the call: both 'unavailable')
    check(r._meta && r._meta['toolhost/error'] === 'unavailable',
          `after kill, not the code 'unavailable': ${JSON.stringify(r)}`);
    if (/is unavailable/.test(txt(r))) {
      unavailable = txt(r);
      // the time to the restart (restart_initial: 1s), when it is
      // scheduled and not under way
      const ra = r._meta['toolhost/retry_after_ms'];
      check(ra === undefined || (Number.isInteger(ra) && ra > 0 && ra <= 1000),
            `retry_after_ms: ${JSON.stringify(r._meta)}`);
      if (ra !== undefined) retryHint = ra;
    } else check(/went away|could not send/.test(txt(r)), `after kill: ${txt(r)}`);
  } else if (unavailable) {
    back = r;
  } else {
    check(meta(r).server_pid === pid1, `answered by a new server before 'unavailable': ${JSON.stringify(r)}`);
  }
  if (!back) await new Promise((ok) => setTimeout(ok, 10));
}
check(unavailable && /server 'ev' is unavailable/.test(unavailable),
      `never unavailable: ${unavailable}`);
check(retryHint !== null, 'no retry_after_ms while the restart was scheduled');
check(back && txt(back) === 'Echo: again' && meta(back).server_pid !== pid1,
      `no recovery: ${JSON.stringify(back)}`);
// the other servers were not disturbed
r = await client.callTool({ name: 'th_echo', arguments: { text: 'still' } });
check(txt(r) === 'still', `th_echo after the crash: ${JSON.stringify(r)}`);

console.log(`ok: ${tools.length} tools; unavailable: ${unavailable}`);
await client.close();
process.exit(0);
