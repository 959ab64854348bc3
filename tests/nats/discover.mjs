// discover.mjs URL USER PASSWORD NAME - the NATS front's service discovery
// seen by the official NATS JavaScript client's services client: PING,
// INFO and STATS of every host named NAME.  Prints one JSON line:
// {pings, hosts, tools: {subject: hosts}, requests, types} and exits 0,
// or prints the error and exits 1.
import { connect } from "nats";

const [url, user, pass, name] = process.argv.slice(2);
const nc = await connect({ servers: url, user, pass, timeout: 5000 });
try {
  const svc = nc.services.client({ maxWait: 1500 });
  const pings = [];
  for await (const p of await svc.ping(name)) pings.push(p);
  const tools = {};
  const ids = new Set();
  const types = new Set();
  for await (const i of await svc.info(name)) {
    ids.add(i.id);
    types.add(i.type);
    for (const e of i.endpoints) tools[e.subject] = (tools[e.subject] || 0) + 1;
  }
  let requests = 0;
  for await (const s of await svc.stats(name)) {
    types.add(s.type);
    if (!s.started) throw new Error("stats without started");
    for (const e of s.endpoints) requests += e.num_requests;
  }
  for (const p of pings) types.add(p.type);
  console.log(JSON.stringify({ pings: pings.length, hosts: ids.size, tools,
                               requests, types: [...types].sort() }));
  await nc.close();
} catch (e) {
  console.log(`discover: ${e.message}`);
  await nc.close();
  process.exit(1);
}
