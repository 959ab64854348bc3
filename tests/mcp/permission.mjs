// permission.mjs - a toolset whose permission policy asks: through
// elicitation/create when the client declared elicitation (accept runs the
// call, decline refuses it), else a tool error saying which rule asked and
// how to allow it.
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { check, connect, deadline } from './common.mjs';

deadline(30000);
{
  const { client } = await connect([], { elicitation: {} });
  let answer = 'accept', asked = 0;
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked++;
    check(/echo/.test(req.params.message), `elicitation message: ${req.params.message}`);
    return answer === 'accept' ? { action: 'accept', content: { allow: true } }
                               : { action: 'decline' };
  });
  let r = await client.callTool({ name: 'echo', arguments: { text: 'ok' } });
  check(asked === 1 && !r.isError && r.content[0].text === 'ok',
        `accepted: ${JSON.stringify(r)}`);
  answer = 'decline';
  r = await client.callTool({ name: 'echo', arguments: { text: 'no' } });
  check(asked === 2 && r.isError === true && /permission/.test(r.content[0].text),
        `declined: ${JSON.stringify(r)}`);
  await client.close();
}
{
  const { client } = await connect();
  const r = await client.callTool({ name: 'echo', arguments: { text: 'x' } });
  const t = r.content[0].text;
  check(r.isError === true && /permission/.test(t) && /elicitation/.test(t) &&
        /action: allow/.test(t), `no elicitation: ${t}`);
  await client.close();
}
console.log('permission: ok');
