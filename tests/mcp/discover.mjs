// discover.mjs - deferred tools over MCP (docs/gateway.md, "Discovery"):
// CONFIG serves many_tools.so with `defer: true` (1,000 tools) and echo.
// tools/list shows echo and search_tools only; search_tools finds
// jira_create_issue first (structuredContent); the session then gets
// notifications/tools/list_changed and lists the tool found; it can be
// called.
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { check, connect, deadline } from './common.mjs';

deadline(60000);
const { client } = await connect();
let changed = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema,
                              () => { changed++; });
let { tools } = await client.listTools();
let names = tools.map((t) => t.name).sort();
check(names.join() === 'echo,search_tools', `before: ${names.slice(0, 10)} (${names.length})`);
const st = tools.find((t) => t.name === 'search_tools');
check(st.inputSchema.properties.query && st.inputSchema.required.includes('query'),
      'search_tools takes a query');
check(st.outputSchema && st.outputSchema.type === 'object', 'search_tools has an outputSchema');

const r = await client.callTool({ name: 'search_tools',
                                  arguments: { query: 'create a jira issue', limit: 3 } });
check(!r.isError, `search_tools failed: ${JSON.stringify(r.content)}`);
const found = r.structuredContent.tools;
check(found.length === 3, `3 results: ${found.length}`);
check(found[0].name === 'jira_create_issue', `first: ${found[0].name}`);
check(found[0].input_schema.properties.scope, 'the input schema comes along');
check(found[0].score >= found[1].score && found[1].score >= found[2].score, 'best first');

for (let i = 0; i < 200 && changed === 0; i++)
  await new Promise((res) => setTimeout(res, 50));
check(changed >= 1, 'list_changed after the search');
({ tools } = await client.listTools());
names = tools.map((t) => t.name).sort();
check(names.join() === found.map((t) => t.name).concat(['echo', 'search_tools']).sort().join(),
      `after: ${names}`);

const c = await client.callTool({ name: 'jira_create_issue', arguments: { scope: 'OPS' } });
check(!c.isError && c.content[0].text === "jira_create_issue ran in 'OPS'",
      `call: ${JSON.stringify(c.content)}`);
// a deferred tool not found yet is callable by name too
const d = await client.callTool({ name: 'slack_watch_webhook', arguments: { scope: 'ops' } });
check(!d.isError, `call of an unlisted deferred tool: ${JSON.stringify(d.content)}`);
// a bad query is a tool error a model can read
const e = await client.callTool({ name: 'search_tools', arguments: { query: ' -- ' } });
check(e.isError && /no word to search for/.test(e.content[0].text), `empty query: ${JSON.stringify(e.content)}`);
await client.close();
console.log('discover: ok');
