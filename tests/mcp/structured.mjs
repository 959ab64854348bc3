// structured.mjs - ABI 1.1 over MCP: title and outputSchema in tools/list,
// structuredContent (plus its JSON as text) in tools/call, checked by the
// SDK client's own output validation; null for an optional parameter (what
// OpenAI strict mode sends) is "absent"; toolhost_caller.front is "mcp".
import { check, connect, deadline, fail } from './common.mjs';

deadline(30000);
const { client } = await connect();

const { tools } = await client.listTools();
const rows = tools.find((t) => t.name === 'abi11_tools_rows');
check(rows, `abi11_tools_rows not listed: ${tools.map((t) => t.name)}`);
check(rows.title === 'Rows', `title: ${JSON.stringify(rows)}`);
check(rows.outputSchema && rows.outputSchema.type === 'object' &&
      rows.outputSchema.properties.rows.type === 'integer',
      `outputSchema: ${JSON.stringify(rows.outputSchema)}`);
const who = tools.find((t) => t.name === 'abi11_tools_who');
check(who && who.outputSchema === undefined && who.title === undefined,
      `a tool without them lists neither: ${JSON.stringify(who)}`);

// structuredContent; the SDK validates it against outputSchema (it throws
// when a tool with an outputSchema returns none or a non-matching one).
let r = await client.callTool({ name: 'abi11_tools_rows',
                                arguments: { limit: 3 } });
check(!r.isError, `rows: ${JSON.stringify(r)}`);
check(r.structuredContent && r.structuredContent.rows === 3,
      `structuredContent: ${JSON.stringify(r)}`);
check(r.content[0].type === 'text' &&
      JSON.parse(r.content[0].text).rows === 3,
      `the JSON as text: ${JSON.stringify(r.content)}`);

// Strict-mode shape: every property sent, the optional ones null.
r = await client.callTool({ name: 'abi11_tools_rows',
                            arguments: { limit: null, bad: null,
                                         notjson: null } });
check(!r.isError && r.structuredContent.rows === 10,
      `nulls as absent (default 10): ${JSON.stringify(r)}`);

// Output that breaks the schema: a tool error, no structuredContent.
r = await client.callTool({ name: 'abi11_tools_rows',
                            arguments: { bad: true } });
check(r.isError === true && r.structuredContent === undefined &&
      /output_schema/.test(r.content[0].text),
      `bad output: ${JSON.stringify(r)}`);

// The front's name reaches the tool.
r = await client.callTool({ name: 'abi11_tools_who', arguments: {} });
check(/front=mcp/.test(r.content[0].text),
      `front: ${JSON.stringify(r.content)}`);

await client.close();
console.log('structured: ok');
process.exit(0);
