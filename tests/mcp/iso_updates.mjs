// iso_updates.mjs - a plugin run with `isolation: process` over MCP with
// the official SDK client (tests/integration/test_iso_content.c): its
// resources are listed and read as an in-process plugin's, and its
// resource_updated() (the tool bad_touch, in the worker process) reaches
// a client that subscribed, as notifications/resources/updated.  A touch
// of a URI that is not the plugin's is dropped by the host (the C test
// looks for the log line).
import { ResourceUpdatedNotificationSchema } from
  '@modelcontextprotocol/sdk/types.js';
import { check, connect, deadline } from './common.mjs';

deadline(30000);
const { client } = await connect(['--log-level', 'debug']);
const updated = [];
let wake = null;
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updated.push(n.params.uri);
  if (wake) wake();
});

const list = await client.listResources();
check(list.resources.some((r) => r.uri === 'bad://fine'),
      `bad://fine is not listed: ${JSON.stringify(list)}`);
const read = await client.readResource({ uri: 'bad://fine' });
check(read.contents.length === 1 && read.contents[0].text === 'fine' &&
      read.contents[0].mimeType === 'text/plain',
      `read of bad://fine: ${JSON.stringify(read)}`);

await client.subscribeResource({ uri: 'bad://fine' });
// another plugin's URI first, forged on the worker's socket: the host
// drops it, so the only notification that may come is bad://fine's
let r = await client.callTool({ name: 'bad_touch',
                                arguments: { uri: 'forge:test://static-text' } });
check(!r.isError, `bad_touch: ${JSON.stringify(r)}`);
r = await client.callTool({ name: 'bad_touch',
                            arguments: { uri: 'bad://fine' } });
check(!r.isError, `bad_touch: ${JSON.stringify(r)}`);
if (updated.length === 0)
  await new Promise((res) => { wake = res; });
check(updated.length >= 1 && updated.every((u) => u === 'bad://fine'),
      `updates: ${JSON.stringify(updated)}`);
console.log('ok');
await client.close();
