// http_client.mjs - the official MCP TypeScript SDK client
// (StreamableHTTPClientTransport) against `toolhost serve` with an http://
// listen entry.  Driven by tests/integration/test_mcp_http.c:
//
//   node http_client.mjs SCENARIO URL [TOKEN]
//
// Prints one JSON object per line ({"step": ..., ...}) and exits 0 when the
// scenario ran to its end (the C test checks the steps), 2 on a usage error.
//   full     connect, list, call, progress, cancel, another call, close
//   connect  connect only: {"step":"connect","ok":false,"status":401} etc.
//   ask      a call whose permission asks: elicitation/create arrives on
//            the call's event stream, the answer goes back as a POST
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [scenario, url, token] = process.argv.slice(2);
if (!scenario || !url) {
  console.error("usage: node http_client.mjs full|connect URL [TOKEN]");
  process.exit(2);
}

const out = (o) => console.log(JSON.stringify(o));
const headers = token ? { Authorization: `Bearer ${token}` } : {};

function statusOf(e) {
  if (e && typeof e.code === "number") return e.code;
  const m = /HTTP (\d{3})|\b(40\d|41\d|50\d)\b/.exec(String(e && e.message));
  return m ? Number(m[1] || m[2]) : 0;
}

async function connect(capabilities = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers },
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 100,
                           maxReconnectionDelay: 100, reconnectionDelayGrowFactor: 1 },
  });
  const client = new Client({ name: "toolhost-http-test", version: "1.0.0" },
                            { capabilities });
  client.onerror = () => {};
  await client.connect(transport);
  return { client, transport };
}

async function full() {
  const { client, transport } = await connect();
  out({ step: "connect", ok: true, session: !!transport.sessionId,
        version: transport.protocolVersion ?? null });

  const { tools } = await client.listTools();
  out({ step: "list", ok: true, tools: tools.map((t) => t.name).sort() });

  const r = await client.callTool({ name: "echo", arguments: { text: "hello over http" } });
  out({ step: "call", ok: !r.isError,
        text: (r.content || []).map((c) => c.text || "").join("") });

  // The host coalesces progress (the latest update wins), so how many of
  // the 4 steps arrive depends on the scheduler: at least one, in order,
  // none past the total.
  let count = 0, last = -1, inOrder = true;
  const p = await client.callTool(
    { name: "echo_async", arguments: { steps: 4, delay_ms: 20, text: "done" } },
    undefined, { onprogress: (u) => {
      count++;
      if (!(u.progress > last) || (u.total !== undefined && u.progress > u.total))
        inOrder = false;
      last = u.progress;
    } });
  out({ step: "progress", ok: !p.isError,
        updates_ok: count >= 1 && count <= 4 && inOrder,
        text: (p.content || []).map((c) => c.text || "").join(""), count });

  // Cancel: abort a long call at its first progress update.
  const ac = new AbortController();
  const t0 = Date.now();
  let cancelled = false;
  try {
    await client.callTool(
      { name: "echo_async", arguments: { steps: 200, delay_ms: 50, text: "never" } },
      undefined, { signal: ac.signal, onprogress: () => ac.abort("test") });
  } catch (e) {
    cancelled = true;
  }
  out({ step: "cancel", ok: cancelled, ms: Date.now() - t0 });
  // The SDK sends notifications/cancelled without waiting for its POST to
  // be answered; give it time to arrive before the session is ended below
  // (else, on a loaded machine, the DELETE can overtake it and the call is
  // cancelled by the session's end instead: the test checks the client's).
  await new Promise((r) => setTimeout(r, 300));

  // The session still answers after the cancel.
  const again = await client.callTool({ name: "echo", arguments: { text: "again" } });
  out({ step: "after", ok: !again.isError,
        text: (again.content || []).map((c) => c.text || "").join("") });

  await transport.terminateSession();
  await client.close();
  out({ step: "close", ok: true });
}

async function ask() {
  const { client, transport } = await connect({ elicitation: {} });
  let asked = 0, answer = "accept";
  client.setRequestHandler(ElicitRequestSchema, async () => {
    asked++;
    return answer === "accept" ? { action: "accept", content: { allow: true } }
                               : { action: "decline" };
  });
  let r = await client.callTool({ name: "text_count", arguments: { path: "rpc.yaml" } });
  out({ step: "accept", ok: asked === 1 && !r.isError,
        text: (r.content || []).map((c) => c.text || "").join("") });
  answer = "decline";
  r = await client.callTool({ name: "text_count", arguments: { path: "rpc.yaml" } });
  out({ step: "decline", ok: asked === 2 && r.isError === true });
  await transport.terminateSession();
  await client.close();
}

async function connectOnly() {
  try {
    const { client } = await connect();
    out({ step: "connect", ok: true });
    await client.close();
  } catch (e) {
    out({ step: "connect", ok: false, status: statusOf(e), error: String(e && e.message) });
  }
}

const timer = setTimeout(() => { out({ step: "timeout" }); process.exit(1); }, 20000);
try {
  if (scenario === "full") await full();
  else if (scenario === "connect") await connectOnly();
  else if (scenario === "ask") await ask();
  else { console.error(`unknown scenario ${scenario}`); process.exit(2); }
} catch (e) {
  out({ step: "error", error: String(e && e.stack || e) });
}
clearTimeout(timer);
process.exit(0);
