// reload.mjs - notifications/tools/list_changed after a hot reload that
// changed the toolset.  CONFIG must list `tools: ["echo"]` (rewritten here
// to add echo_async) with host.reload: signal.
import { readFileSync, writeFileSync } from 'node:fs';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { check, connect, deadline } from './common.mjs';

deadline(30000);
const config = process.argv[3];
const { client, transport } = await connect();
let changed = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema,
                              () => { changed++; });
let { tools } = await client.listTools();
check(tools.map((t) => t.name).join() === 'echo', `before: ${tools.map((t) => t.name)}`);

// A reload that changes nothing visible: no list_changed.
process.kill(transport.pid, 'SIGHUP');
await new Promise((r) => setTimeout(r, 1500));
check(changed === 0, `list_changed after a no-op reload (${changed})`);

const text = readFileSync(config, 'utf8');
check(text.includes('tools: ["echo"]'), 'config marker');
writeFileSync(config, text.replace('tools: ["echo"]', 'tools: ["echo", "echo_async"]'));
process.kill(transport.pid, 'SIGHUP');
for (let i = 0; i < 100 && changed === 0; i++)
  await new Promise((r) => setTimeout(r, 100));
check(changed === 1, `list_changed after the reload: ${changed}`);
({ tools } = await client.listTools());
check(tools.map((t) => t.name).sort().join() === 'echo,echo_async',
      `after: ${tools.map((t) => t.name)}`);
await client.close();
console.log('reload: ok');
