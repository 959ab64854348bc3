// content.mjs - resources, prompts and completion (plugin ABI 1.4) with the
// official SDK client over stdio, against the conformance fixture
// (build/fixtures/conform_tools.so): list and read a text, a binary and a
// templated resource, subscribe, get prompts (arguments, an image, an
// embedded resource), complete a prompt argument and a template variable,
// and the errors a client sees (an unknown URI, a missing argument).
// Then tool results of several blocks (write_block) and a tool that asks
// the client (ask_client): a sampling request and a form, answered by
// this client's handlers, and what a client without those capabilities
// gets.  (The conformance suite runs the same tools over HTTP.)
import { CreateMessageRequestSchema, ElicitRequestSchema } from
  '@modelcontextprotocol/sdk/types.js';
import { check, connect, deadline, fail } from './common.mjs';

deadline(60000);
const { client } = await connect([], { sampling: {}, elicitation: {} });
let sampled = null, elicited = null, formAnswer = 'accept';
client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  sampled = req.params;
  return { role: 'assistant', content: { type: 'text', text: 'four' },
           model: 'test-model', stopReason: 'endTurn' };
});
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  elicited = req.params;
  return formAnswer === 'accept'
    ? { action: 'accept', content: { username: 'ada', email: 'ada@example.org' } }
    : { action: 'decline' };
});

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

// A result of several blocks: stdout's text, then the tool's blocks.
let t = await client.callTool({ name: 'test_multiple_content_types', arguments: {} });
check(!t.isError && t.content.length === 3 &&
      t.content[0].type === 'text' && t.content[0].text === 'Multiple content types test:' &&
      t.content[1].type === 'image' && t.content[1].mimeType === 'image/png' &&
      Buffer.from(t.content[1].data, 'base64').length === 69 &&
      t.content[2].type === 'resource' &&
      t.content[2].resource.uri === 'test://mixed-content-resource' &&
      JSON.parse(t.content[2].resource.text).value === 123 &&
      !(t._meta && t._meta['toolhost/meta'] && t._meta['toolhost/meta'].toolhost),
      `mixed content: ${JSON.stringify(t)}`);
t = await client.callTool({ name: 'test_image_content', arguments: {} });
check(!t.isError && t.content.length === 1 && t.content[0].type === 'image',
      `image: ${JSON.stringify(t)}`);

// Sampling: the request reaches this client, its answer the tool.
t = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'two plus "two"?' } });
check(!t.isError && sampled && sampled.maxTokens === 100 &&
      sampled.messages[0].content.text === 'two plus "two"?' &&
      /^LLM response: /.test(t.content[0].text) &&
      JSON.parse(t.content[0].text.slice(14)).content.text === 'four',
      `sampling: ${JSON.stringify(t)} asked ${JSON.stringify(sampled)}`);

// A form: accepted, then declined.
t = await client.callTool({ name: 'test_elicitation', arguments: { message: 'Who are you?' } });
check(!t.isError && elicited && elicited.message === 'Who are you?' &&
      elicited.requestedSchema.required.includes('email') &&
      JSON.parse(t.content[0].text.slice(15)).content.username === 'ada',
      `elicitation: ${JSON.stringify(t)}`);
formAnswer = 'decline';
t = await client.callTool({ name: 'test_elicitation', arguments: { message: 'Again?' } });
check(!t.isError && JSON.parse(t.content[0].text.slice(15)).action === 'decline',
      `elicitation declined: ${JSON.stringify(t)}`);

await client.close();

// A client that declared neither: the tool is told, and says so.
const plain = (await connect()).client;
t = await plain.callTool({ name: 'test_sampling', arguments: { prompt: 'x' } });
check(t.isError && /cannot answer sampling/.test(JSON.stringify(t.content)),
      `sampling without the capability: ${JSON.stringify(t)}`);
t = await plain.callTool({ name: 'test_elicitation', arguments: { message: 'x' } });
check(t.isError && /cannot answer elicitation/.test(JSON.stringify(t.content)),
      `elicitation without the capability: ${JSON.stringify(t)}`);
await plain.close();
console.log('content: ok');
