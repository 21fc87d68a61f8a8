// An AI agent's loop through the MCP TypeScript SDK's client, given only
// the MCP endpoint's URL (argv[2]): it signs in by OAuth (the SDK finds
// the authorization server, registers, sends the person to the consent
// page, whose URL it prints as {"authorize": url}, and takes the code at
// its loopback callback), then makes a site, checkpoints it, installs and
// activates a plugin (argv[3] is its PHP), takes a screenshot, restores
// the checkpoint, and deletes the site. Each step prints one JSON line;
// the last is {"done": true}. Any failure prints {"error": …} and exits 1.
import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const endpoint = new URL(process.argv[2]);
const plugin = process.argv[3];
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");

// The loopback callback: its first request with a code ends the wait.
let gotCode;
const code = new Promise((resolve) => (gotCode = resolve));
const cb = http.createServer((req, res) => {
  const u = new URL(req.url, "http://127.0.0.1");
  if (u.pathname !== "/callback") { res.writeHead(404).end(); return; }
  res.writeHead(200, { "Content-Type": "text/html" }).end("<html><body id=done>back at the client</body></html>");
  gotCode(u.searchParams.get("code"));
});
await new Promise((r) => cb.listen(0, "127.0.0.1", r));
const redirect = `http://127.0.0.1:${cb.address().port}/callback`;

// Everything the SDK keeps, in memory.
const store = {};
const provider = {
  get redirectUrl() { return redirect; },
  get clientMetadata() {
    return { client_name: "TypeScript MCP e2e", redirect_uris: [redirect], grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"], token_endpoint_auth_method: "none" };
  },
  clientInformation: () => store.client,
  saveClientInformation: (c) => { store.client = c; },
  tokens: () => store.tokens,
  saveTokens: (t) => { store.tokens = t; },
  redirectToAuthorization: (u) => say({ authorize: u.toString() }),
  saveCodeVerifier: (v) => { store.verifier = v; },
  codeVerifier: () => store.verifier,
};

async function connect() {
  const client = new Client({ name: "ts-e2e", version: "1" });
  await client.connect(new StreamableHTTPClientTransport(endpoint, { authProvider: provider }));
  return client;
}

const progress = [];
async function call(client, name, args) {
  const r = await client.callTool({ name, arguments: args }, undefined, {
    onprogress: (p) => progress.push(`${name} ${p.progress} ${p.message ?? ""}`),
    timeout: 600000,
  });
  if (r.isError) throw new Error(`${name}: ${r.content?.[0]?.text}`);
  return r;
}

try {
  let client;
  try {
    client = await connect();
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
    const transport = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
    await transport.finishAuth(await code);
    client = await connect();
  }
  cb.close();
  const tools = (await client.listTools()).tools.map((t) => t.name);
  say({ tools });
  const t0 = Date.now();
  const made = (await call(client, "site_create", { name: "TS loop" })).structuredContent;
  const id = made.site.id;
  say({ site: made.site, loginUrl: made.loginUrl });
  const cp = (await call(client, "checkpoint_create", { siteId: id, name: "clean" })).structuredContent.checkpoint;
  await call(client, "file_write", { siteId: id, path: "wp-content/plugins/mcp-band/mcp-band.php", text: plugin });
  const plugins = (await call(client, "plugin_activate", { siteId: id, slug: "mcp-band", active: true })).structuredContent.plugins;
  say({ activated: plugins.find((p) => p.slug === "mcp-band") });
  const shot = await call(client, "screenshot", { siteId: id, width: 1024, height: 700 });
  const image = shot.content.find((c) => c.type === "image");
  say({ screenshot: image.data, mimeType: image.mimeType, loaded: shot.structuredContent.loaded });
  await call(client, "checkpoint_restore", { siteId: id, checkpointId: cp.id });
  const after = (await call(client, "plugins_list", { siteId: id })).structuredContent.plugins;
  say({ afterRestore: after.map((p) => p.slug) });
  const again = await call(client, "screenshot", { siteId: id, width: 1024, height: 700 });
  say({ screenshotAfter: again.content.find((c) => c.type === "image").data });
  await call(client, "site_delete", { siteId: id });
  say({ loopMs: Date.now() - t0, progress });
  await client.close();
  say({ done: true });
} catch (e) {
  say({ error: String(e?.stack ?? e) });
  process.exit(1);
}
