// content.mjs - resources, prompts and completion (plugin ABI 1.4) with the
// official SDK client over stdio, against the conformance fixture
// (build/fixtures/conform_tools.so): list and read a text, a binary and a
// templated resource, subscribe, get prompts (arguments, an image, an
// embedded resource), complete a prompt argument and a template variable,
// and the errors a client sees (an unknown URI, a missing argument).
import { check, connect, deadline, fail } from './common.mjs';

deadline(60000);
const { client } = await connect();

const caps = client.getServerCapabilities();
check(caps.resources && caps.resources.subscribe === true && caps.prompts &&
      caps.completions, `capabilities: ${JSON.stringify(caps)}`);

const { resources } = await client.listResources();
const uris = resources.map((r) => r.uri).sort();
check(JSON.stringify(uris) === JSON.stringify(
        ['test://static-binary', 'test://static-text', 'test://watched-resource']),
      `resources/list: ${JSON.stringify(resources)}`);
const { resourceTemplates } = await client.listResourceTemplates();
check(resourceTemplates.length === 1 &&
      resourceTemplates[0].uriTemplate === 'test://template/{id}/data',
      `templates: ${JSON.stringify(resourceTemplates)}`);

let r = await client.readResource({ uri: 'test://static-text' });
check(r.contents[0].text === 'This is the content of the static text resource.' &&
      r.contents[0].mimeType === 'text/plain', `read text: ${JSON.stringify(r)}`);
r = await client.readResource({ uri: 'test://static-binary' });
const png = Buffer.from(r.contents[0].blob, 'base64');
check(png.length === 69 && png.subarray(1, 4).toString() === 'PNG',
      `read binary: ${JSON.stringify(r)}`);
r = await client.readResource({ uri: 'test://template/7/data' });
check(JSON.parse(r.contents[0].text).id === '7', `read template: ${JSON.stringify(r)}`);
try {
  await client.readResource({ uri: 'test://no-such' });
  fail('an unknown URI was read');
} catch (e) {
  check(e.code === -32002, `unknown URI: code ${e.code}`);
}
await client.subscribeResource({ uri: 'test://watched-resource' });
await client.unsubscribeResource({ uri: 'test://watched-resource' });

const { prompts } = await client.listPrompts();
check(prompts.length === 4 && prompts.every((p) => p.description),
      `prompts/list: ${JSON.stringify(prompts)}`);
let p = await client.getPrompt({ name: 'test_prompt_with_arguments',
                                 arguments: { arg1: 'a1', arg2: 'b2' } });
check(p.messages[0].content.text === "Prompt with arguments: arg1='a1', arg2='b2'",
      `prompt args: ${JSON.stringify(p)}`);
p = await client.getPrompt({ name: 'test_prompt_with_image' });
check(p.messages[0].content.type === 'image' &&
      p.messages[0].content.mimeType === 'image/png', `prompt image: ${JSON.stringify(p)}`);
p = await client.getPrompt({ name: 'test_prompt_with_embedded_resource',
                             arguments: { resourceUri: 'test://x' } });
check(p.messages[0].content.type === 'resource' &&
      p.messages[0].content.resource.uri === 'test://x', `prompt resource: ${JSON.stringify(p)}`);
try {
  await client.getPrompt({ name: 'test_prompt_with_arguments', arguments: { arg1: 'x' } });
  fail('a missing prompt argument was accepted');
} catch (e) {
  check(e.code === -32602 && /arg2/.test(e.message), `missing argument: ${e.code} ${e.message}`);
}

let c = await client.complete({ ref: { type: 'ref/prompt', name: 'test_prompt_with_arguments' },
                                argument: { name: 'arg1', value: 'par' } });
check(JSON.stringify(c.completion.values) === '["paris","park","party"]',
      `complete prompt: ${JSON.stringify(c)}`);
c = await client.complete({ ref: { type: 'ref/resource', uri: 'test://template/{id}/data' },
                            argument: { name: 'id', value: '2' } });
check(JSON.stringify(c.completion.values) === '["200"]', `complete template: ${JSON.stringify(c)}`);

await client.close();
console.log('content: ok');
