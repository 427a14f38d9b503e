"use strict";

// Sessions: one server lease per Locks (per node and ttl), one keepalive
// for all of its holds, and revocation.
const { test } = require("node:test");
const { performance } = require("perf_hooks");
const assert = require("node:assert/strict");
const { createClient } = require("redis");
const { Locks, LostError, RevokedError, ServerError } = require("..");
const { Server, eventually, within, aborted, sleep } = require("./helpers");

async function setup(t, options) {
  const server = await Server.start(t);
  const locks = new Locks(await server.client(), options);
  return { server, locks };
}

// A number in INFO `section` after `prefix` (commandstats' calls=, errorstats' count=); 0 when absent.
async function stat(server, section, prefix) {
  const line = (await server.do("INFO", section)).split("\r\n").find((l) => l.startsWith(prefix));
  return line ? Number(line.slice(prefix.length).split(",")[0]) : 0;
}

// LOCK.LEASE INFO id's count of attached holds (-1: gone).
async function leaseHolds(server, id) {
  const reply = await server.do("LOCK.LEASE", "INFO", id);
  if (reply === null) return -1;
  return Number(reply[reply.indexOf("holds") + 1]);
}

test("many holds share one lease and one keepalive", async (t) => {
  const { server, locks } = await setup(t);
  const ttl = 300;
  const held = [];
  for (let i = 0; i < 10; i++) held.push(await locks.acquire(`job:${i}`, ttl));
  for (let i = 0; i < 2; i++) held.push(await locks.acquire("catalog", ttl, { shared: true }));
  held.push(await locks.semaphore("renders", 3).acquire(ttl, { count: 2 }));
  const session = held[0].session;
  assert.ok(session !== null);
  for (const lock of held) assert.equal(lock.session, session, "every hold of one Locks and ttl is attached to one session");
  assert.equal(session.holds, held.length);
  assert.equal(session.ttl, ttl);
  assert.equal(await leaseHolds(server, session.id), held.length);
  assert.equal(await server.counter("lock", "lock_leases"), 1);
  await sleep(1000); // more than three ttls
  for (const lock of held) assert.equal(lock.lost, false, "the session keeps every hold");
  assert.equal((await server.info("job:9")).fence, held[9].fence);
  const keepalives = await server.counter("lock", "lock_keepalives");
  assert.ok(keepalives >= 2 && keepalives <= 20, `${keepalives} keepalives in a second, for a ttl of ${ttl} ms`);
  const extends_ = (await stat(server, "commandstats", "cmdstat_lock.extend:calls=")) + (await stat(server, "commandstats", "cmdstat_sem.extend:calls="));
  assert.equal(extends_, 0, "an attached hold is never extended on its own");
  for (const lock of held) assert.equal(await lock.release(), true);
  assert.equal(session.holds, 0);
  assert.equal(session.ended, null);
});

for (const keepalive of ["auto", "watchdog"]) {
  test(`revoke tells the holder why, with the reason (keepalive ${keepalive})`, async (t) => {
    const { locks } = await setup(t, { keepalive });
    const lock = await locks.acquire("job", 300);
    const other = await locks.acquire("other", 300);
    assert.equal(await locks.revoke("job", "stuck since 03:00, OPS-12"), 1);
    await within("the holder learns it", aborted(lock.signal));
    const reason = lock.signal.reason;
    assert.ok(reason instanceof RevokedError && reason instanceof LostError);
    assert.equal(reason.reason, "revoked");
    assert.equal(reason.revokedReason, "stuck since 03:00, OPS-12");
    assert.ok(reason.message.includes("stuck since 03:00") && !reason.message.includes(lock.token));
    assert.equal(other.lost, false, "another hold is not revoked");
    assert.equal(await locks.revoke("job"), 0, "revoking a free key ends nothing");
  });
}

test("a revoked holder's guard and extend say so; nothing it guards lands", async (t) => {
  const { server, locks } = await setup(t);
  const lock = await locks.acquire("{billing}:lock", 10000);
  await lock.extend(10000); // attached: checks that it holds
  assert.ok(lock.session !== null && !lock.lost);
  assert.equal(await locks.revoke("{billing}:lock"), 1);
  await assert.rejects(lock.guard("INCRBY", "{billing}:total", 100), (err) => err instanceof RevokedError && err.revokedReason === "revoked by an operator");
  assert.equal(lock.signal.aborted, true, "the guard's REVOKED marks the lock lost");
  assert.equal(await server.do("GET", "{billing}:total"), null, "the revoked holder's guarded write did not land");
  const second = await locks.acquire("{billing}:lock", 10000);
  await locks.revoke("{billing}:lock", "maintenance");
  await assert.rejects(second.extend(1000), (err) => err instanceof RevokedError && err.revokedReason === "maintenance");
  await assert.rejects(locks.revoke("k", "x".repeat(129)), RangeError);
  await assert.rejects(locks.revoke("k", ""), RangeError);
});

test("a revoked lease ends every hold at once, and the next hold gets a new one", async (t) => {
  const { server, locks } = await setup(t);
  const held = [];
  for (let i = 0; i < 5; i++) held.push(await locks.acquire(`job:${i}`, 300));
  const session = held[0].session;
  let toldFirst = null;
  session.signal.addEventListener("abort", () => (toldFirst = held.every((lock) => lock.signal.aborted)));
  assert.equal(await server.do("LOCK.LEASE", "REVOKE", session.id), 5);
  await within("the session ends", aborted(session.signal));
  assert.equal(toldFirst, true, "every hold is told before the session's signal");
  for (const lock of held) {
    assert.ok(lock.lostError instanceof RevokedError);
    assert.equal(lock.lostError.revokedReason, "lease revoked");
  }
  assert.ok(session.ended instanceof RevokedError);
  const next = await locks.acquire("job:0", 300);
  assert.ok(next.session !== null && next.session !== session, "a new session");
  assert.equal(await server.counter("lock", "lock_leases_granted"), 2);
  await next.release();
});

test("failed keepalives end every hold at once, as expired", async (t) => {
  const { locks } = await setup(t);
  const driver = locks.driver;
  const dropping = new Locks({
    send: async (key, args) => {
      if (args[0] === "LOCK.LEASE" && args[1] === "KEEPALIVE") throw Object.assign(new Error("read ECONNRESET (injected)"), { code: "ECONNRESET" });
      return driver.send(key, args);
    },
    dedicated: (key) => driver.dedicated(key),
  });
  const held = [];
  for (let i = 0; i < 3; i++) held.push(await dropping.acquire(`job:${i}`, 300));
  const session = held[0].session;
  let toldFirst = null;
  session.signal.addEventListener("abort", () => (toldFirst = held.every((lock) => lock.signal.aborted)));
  await within("the session expires", aborted(session.signal));
  assert.equal(toldFirst, true);
  for (const lock of held) assert.equal(lock.lostError.reason, "expired");
});

test("an acquire answered NOLEASE is sent again once, with a new lease", async (t) => {
  const { server, locks } = await setup(t);
  const first = await locks.acquire("a", 10000); // the next keepalive is 3 s away
  const session = first.session;
  await server.do("LOCK.LEASE", "REVOKE", session.id);
  const second = await locks.acquire("b", 10000); // names the revoked lease
  assert.equal(await stat(server, "errorstats", "errorstat_NOLEASE:count="), 1, "answered NOLEASE, else the test proves nothing");
  assert.ok(second.session !== session);
  assert.equal(await server.counter("lock", "lock_leases_granted"), 2);
  assert.equal((await server.info("b")).fence, second.fence);
  await within("the old session's hold is lost", aborted(first.signal));
  assert.ok(first.lostError instanceof RevokedError);
  await second.release();
});

test("a release with no answer is sent again by the session", async (t) => {
  const { server, locks } = await setup(t);
  const driver = locks.driver;
  let failed = 0;
  const failing = new Locks({
    send: async (key, args) => {
      if (args[0] === "LOCK.RELEASE" && failed++ === 0) throw Object.assign(new Error("write ECONNRESET (injected)"), { code: "ECONNRESET" });
      return driver.send(key, args);
    },
    dedicated: (key) => driver.dedicated(key),
  });
  const lock = await failing.acquire("job", 300);
  await assert.rejects(lock.release(), /ECONNRESET/);
  assert.equal((await server.info("job")).fence, lock.fence, "the release did not reach the server, else the test proves nothing");
  // Not called again: the session's next keepalive sends it.
  await eventually("the session releases it", async () => (await server.info("job")) === null);
  assert.equal(await server.counter("lock", "lock_leases_granted"), 1);
});

test("keepalive auto falls back to watchdogs where LOCK.LEASE is refused", async (t) => {
  const server = await Server.start(t);
  await server.do("ACL", "SETUSER", "nolease", "on", "nopass", "~*", "+@all", "-lock.lease");
  const client = createClient({ url: `redis://nolease:x@127.0.0.1:${server.port}/` });
  client.on("error", () => {});
  await client.connect();
  t.after(() => client.disconnect().catch(() => {}));
  const lock = await new Locks(client).acquire("job", 300);
  assert.equal(lock.session, null, "without LOCK.LEASE, a watchdog");
  await eventually("the watchdog extends", async () => (await server.info("job")).extends >= 1);
  assert.equal(await lock.release(), true);
  await assert.rejects(new Locks(client, { keepalive: "session" }).acquire("job", 1000), (err) => err instanceof ServerError && err.code === "NOPERM");
  assert.throws(() => new Locks(client, { keepalive: "sometimes" }), RangeError);
});

// What keeping 1,000 holds alive for two ttls costs the server, with the
// session and with a watchdog per lock (the figures of docs/clients/node.md).
// About 15 s: LOCK_MEASURE=1 node --test test/session.test.js
test("the cost of keeping 1,000 holds alive", { skip: !process.env.LOCK_MEASURE && "set LOCK_MEASURE=1 to measure" }, async (t) => {
  const holds = 1000;
  const ttl = 3000;
  const perSecond = {};
  for (const keepalive of ["session", "watchdog"]) {
    const { server, locks } = await setup(t, { keepalive });
    const held = [];
    for (let i = 0; i < holds; i++) held.push(await locks.acquire(`job:${i}`, ttl));
    const kept = async () => {
      let calls = 0;
      for (const command of ["lock.extend", "lock.lease|keepalive", "lock.lease|info"]) calls += await stat(server, "commandstats", `cmdstat_${command}:calls=`);
      return calls;
    };
    const before = await kept();
    const started = performance.now();
    await sleep(2 * ttl);
    const seconds = (performance.now() - started) / 1000;
    perSecond[keepalive] = ((await kept()) - before) / seconds;
    t.diagnostic(`${keepalive}: ${holds} holds of ${ttl} ms for ${seconds.toFixed(1)} s: ${perSecond[keepalive].toFixed(1)} server calls/s to keep them alive`);
    for (const lock of held) {
      assert.equal(lock.lost, false);
      await lock.release();
    }
  }
  assert.ok(perSecond.session * 100 < perSecond.watchdog, JSON.stringify(perSecond));
});
