// The conformance driver of the Node package (clients/node): speaks the
// protocol of conformance/PROTOCOL.md on stdin and stdout, and maps each
// command onto the package's public API only, as a user would. Loss events
// come from each lock's own AbortSignal (its reason, a LostError).
//
// node-redis 4 from Debian, offline; conformance/run.py runs it as
//   NODE_PATH=target/node_modules:/usr/share/nodejs node conformance/drivers/node/driver.js redis://127.0.0.1:6379
// with target/node_modules/redis-lock-client a link to clients/node.
"use strict";

const readline = require("readline");
const { createClient } = require("redis");
const { Locks, NotAcquiredError, LostError, RevokedError, ServerError, LimitError, TimeoutError } =
  require("redis-lock-client");

// Why an acquire was aborted when the harness cancels it.
class Cancelled extends Error {}

function emit(event) {
  process.stdout.write(JSON.stringify(event) + "\n");
}

function kindOf(err) {
  if (err instanceof Cancelled) return "cancelled";
  if (err instanceof RevokedError) return "revoked";
  if (err instanceof LostError) return "lost";
  if (err instanceof LimitError) return "limit";
  if (err instanceof ServerError) {
    if (err.code === "WRONGTYPE") return "wrongtype";
    if (err.code === "NOSYNC") return "nosync";
    return "server";
  }
  if (err instanceof TimeoutError) return "timeout";
  return "connection";
}

// A reply as JSON: Buffers as strings, arrays item by item.
function toJSON(reply) {
  if (Buffer.isBuffer(reply)) return reply.toString();
  if (Array.isArray(reply)) return reply.map(toJSON);
  if (reply === undefined) return null;
  return reply;
}

async function main() {
  const url = process.argv[2];
  if (!url) throw new Error("usage: driver.js redis://host:port");
  // As docs/clients/node.md's example: an "error" listener, or a dropped
  // connection ends the process; node-redis reconnects by itself.
  const client = createClient({ url });
  client.on("error", (err) => console.error("redis:", err.message));
  await client.connect();
  const locks = {
    session: new Locks(client, { keepalive: "session" }),
    watchdog: new Locks(client, { keepalive: "watchdog" }),
  };
  const names = new Map(); // name -> { controller, lock, released }

  const fail = (cmd, kind, message) =>
    emit({ re: cmd.re, ev: "error", name: cmd.name, kind, message: String(message) });

  function lookup(cmd) {
    const entry = names.get(cmd.name);
    if (!entry) fail(cmd, "invalid", "unknown name");
    return entry;
  }

  async function acquire(cmd) {
    if (!Array.isArray(cmd.keys) || cmd.keys.length === 0) return fail(cmd, "invalid", "no keys");
    if (cmd.sync && !(Array.isArray(cmd.sync) && cmd.sync.length === 2)) {
      return fail(cmd, "invalid", "sync is [numreplicas, timeout_ms]");
    }
    const mode = cmd.mode || "session";
    if (!(mode in locks)) return fail(cmd, "invalid", `unknown mode ${mode}`);
    if (names.has(cmd.name)) return fail(cmd, "invalid", "name already used");
    const entry = { controller: new AbortController(), lock: null, released: false };
    names.set(cmd.name, entry);
    const options = { signal: entry.controller.signal };
    if (cmd.wait_ms !== null && cmd.wait_ms !== undefined) options.wait = cmd.wait_ms;
    if (cmd.sync) options.sync = { replicas: cmd.sync[0], timeout: cmd.sync[1] };
    let lock;
    try {
      lock = cmd.keys.length === 1
        ? await locks[mode].acquire(cmd.keys[0], cmd.ttl_ms, options)
        : await locks[mode].acquireMany(cmd.keys, cmd.ttl_ms, options);
    } catch (err) {
      if (err instanceof NotAcquiredError) return emit({ re: cmd.re, ev: "not_acquired", name: cmd.name });
      return fail(cmd, kindOf(err), err && err.message);
    }
    entry.lock = lock;
    emit({ re: cmd.re, ev: "acquired", name: cmd.name, fence: lock.fence });
    const report = () => {
      const lost = lock.lostError || lock.signal.reason;
      emit({
        ev: "lost", name: cmd.name,
        reason: lost instanceof LostError ? lost.reason : "unknown",
        revoked_reason: lost instanceof RevokedError ? lost.revokedReason : null,
      });
    };
    if (lock.signal.aborted) report();
    else lock.signal.addEventListener("abort", report, { once: true });
  }

  async function release(cmd) {
    const entry = lookup(cmd);
    if (!entry) return;
    if (!entry.lock) return fail(cmd, "invalid", "not acquired");
    try {
      const result = await entry.lock.release();
      entry.released = true;
      emit({ re: cmd.re, ev: "released", name: cmd.name, result });
    } catch (err) {
      fail(cmd, kindOf(err), err && err.message);
    }
  }

  async function guard(cmd) {
    const entry = lookup(cmd);
    if (!entry) return;
    if (!entry.lock || !Array.isArray(cmd.command) || cmd.command.length === 0) {
      return fail(cmd, "invalid", "not acquired, or no command");
    }
    try {
      const reply = await entry.lock.guard(...cmd.command.map(String));
      emit({ re: cmd.re, ev: "guarded", name: cmd.name, reply: toJSON(reply) });
    } catch (err) {
      fail(cmd, kindOf(err), err && err.message);
    }
  }

  function held(cmd) {
    const entry = lookup(cmd);
    if (!entry) return;
    if (!entry.lock) return fail(cmd, "invalid", "not acquired");
    const lost = entry.lock.lostError;
    emit({
      re: cmd.re, ev: "held", name: cmd.name,
      held: !entry.lock.lost && !entry.released,
      reason: lost ? lost.reason : null,
    });
  }

  function cancel(cmd) {
    const entry = lookup(cmd);
    if (!entry) return;
    entry.controller.abort(new Cancelled("cancelled by the harness"));
    emit({ re: cmd.re, ev: "cancelled", name: cmd.name });
  }

  const handlers = { acquire, release, guard, held, cancel };
  let quitRe = null;
  emit({ ev: "ready" });
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    let cmd;
    try {
      cmd = JSON.parse(line);
    } catch (err) {
      console.error("bad line:", line);
      continue;
    }
    if (cmd.op === "quit") {
      quitRe = cmd.re;
      break;
    }
    const handler = handlers[cmd.op];
    if (!handler) {
      fail(cmd, "invalid", `unknown op ${cmd.op}`);
      continue;
    }
    // Not awaited: a waiting acquire must not hold up later commands.
    Promise.resolve(handler(cmd)).catch((err) => fail(cmd, "invalid", err && err.stack));
  }
  emit({ re: quitRe, ev: "bye" });
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
