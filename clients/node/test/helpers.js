// A fresh server with the module for each test, on a free loopback port,
// killed at the end of the test (resumed first if paused).
//   LOCK_MODULE       the module (default: target/debug/libredis_lock.so at the repository's root)
//   LOCK_TEST_SERVER  the server binary (default: redis-server)
// node-redis comes from Debian: NODE_PATH=/usr/share/nodejs.
"use strict";

const { spawn, execFileSync } = require("child_process");
const fs = require("fs");
const net = require("net");
const os = require("os");
const path = require("path");
const { setTimeout: sleep } = require("timers/promises");
const { createClient, createCluster } = require("redis");

const MODULE = process.env.LOCK_MODULE || path.resolve(__dirname, "../../../target/debug/libredis_lock.so");
const SERVER = process.env.LOCK_TEST_SERVER || "redis-server";

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.on("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

function ping(port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.setTimeout(1000);
    socket.once("data", (data) => {
      socket.destroy();
      resolve(data.toString().startsWith("+PONG"));
    });
    socket.once("connect", () => socket.write("PING\r\n"));
    socket.once("error", () => resolve(false));
    socket.once("timeout", () => {
      socket.destroy();
      resolve(false);
    });
  });
}

class Server {
  static async start(t, extra = []) {
    if (!fs.existsSync(MODULE)) throw new Error(`no module at ${MODULE}: cargo build --locked --lib -p redis-lock, or set LOCK_MODULE`);
    let log = "";
    for (let attempt = 0; attempt < 5; attempt++) {
      const server = new Server(await freePort(), fs.mkdtempSync(path.join(os.tmpdir(), "redis-lock-node-")));
      server.process = spawn(SERVER, [
        "--port", String(server.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", server.dir, "--logfile", "server.log", "--loadmodule", MODULE, ...extra,
      ], { stdio: "ignore" });
      t.after(() => server.kill());
      if (await server.answers(5000)) return server;
      log = server.log();
      server.kill();
    }
    throw new Error(`${SERVER} with ${MODULE} did not start:\n${log}`);
  }

  constructor(port, dir) {
    this.port = port;
    this.dir = dir;
    this.process = null;
    this.clients = [];
  }

  get url() {
    return `redis://127.0.0.1:${this.port}/`;
  }

  async answers(withinMs) {
    const deadline = Date.now() + withinMs;
    while (Date.now() < deadline) {
      if (this.process.exitCode !== null) return false;
      if (await ping(this.port)) return true;
      await sleep(20);
    }
    return false;
  }

  log() {
    try {
      return fs.readFileSync(path.join(this.dir, "server.log"), "utf8");
    } catch {
      return "";
    }
  }

  kill() {
    for (const client of this.clients.splice(0)) client.disconnect().catch(() => {});
    if (this.process && this.process.exitCode === null) {
      this.process.kill("SIGCONT");
      this.process.kill("SIGKILL");
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  // The server process dies (SIGKILL); its clients stay, and try to reconnect.
  crash() {
    if (this.process && this.process.exitCode === null) {
      this.process.kill("SIGCONT");
      this.process.kill("SIGKILL");
    }
  }

  pause() {
    this.process.kill("SIGSTOP");
  }

  // A connected node-redis client, disconnected at the end.
  async client(options = {}) {
    const client = createClient({ url: this.url, ...options });
    client.on("error", () => {});
    await client.connect();
    this.clients.push(client);
    return client;
  }

  // One command on a fresh connection, for looking at the server from outside.
  async do(...args) {
    const client = createClient({ url: this.url, socket: { reconnectStrategy: () => new Error("no") } });
    client.on("error", () => {});
    await client.connect();
    try {
      return await client.sendCommand(args.map(String));
    } finally {
      await client.disconnect();
    }
  }

  async info(key) {
    const reply = await this.do("LOCK.INFO", key);
    if (reply === null) return null;
    const fields = {};
    for (let i = 0; i + 1 < reply.length; i += 2) fields[reply[i]] = reply[i + 1];
    return fields;
  }

  async queued(key) {
    return (await this.do("LOCK.QUEUE", key)).length;
  }

  async counter(section, field) {
    const text = await this.do("INFO", section);
    const match = text.match(new RegExp(`^${field}:(\\d+)`, "m"));
    return match ? Number(match[1]) : -1;
  }
}

// Three masters joined by redis-cli --cluster create (no replicas: the tests
// are about routing).
async function startCluster(t) {
  const nodes = [];
  for (let i = 0; i < 3; i++) {
    nodes.push(await Server.start(t, ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"]));
  }
  const out = execFileSync("redis-cli", ["--cluster", "create", ...nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-replicas", "0", "--cluster-yes"], { encoding: "utf8", timeout: 30000 });
  if (!out.includes("[OK] All 16384 slots covered")) throw new Error(`redis-cli --cluster create:\n${out}`);
  await eventually("the cluster is ok", async () => {
    for (const node of nodes) if (!(await node.do("CLUSTER", "INFO")).includes("cluster_state:ok")) return false;
    return true;
  }, 30000);
  const cluster = createCluster({ rootNodes: [{ url: nodes[0].url }] });
  cluster.on("error", () => {});
  await cluster.connect();
  t.after(() => cluster.disconnect().catch(() => {}));
  return { nodes, cluster };
}

// Waits (a generous, bounded while) for an async condition.
async function eventually(what, condition, withinMs = 10000) {
  const deadline = Date.now() + withinMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`not true after ${withinMs} ms: ${what}`);
    await sleep(10);
  }
}

// A promise settled within a bounded while, or an error naming it.
async function within(what, promise, withinMs = 10000) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not within ${withinMs} ms: ${what}`)), withinMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

// Resolves when the signal is aborted.
const aborted = (signal) => new Promise((resolve) => (signal.aborted ? resolve() : signal.addEventListener("abort", resolve, { once: true })));

module.exports = { Server, startCluster, eventually, within, aborted, sleep };
