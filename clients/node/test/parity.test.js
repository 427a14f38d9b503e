// SYNC on acquires and extends, one lock over several keys (LOCK.MACQUIRE,
// LOCK.MEXTEND, LOCK.MRELEASE), and the check of the server's module
// version: what the Python and Rust packages have too.
"use strict";

const { test } = require("node:test");
const assert = require("node:assert/strict");
const {
  Locks, NotAcquiredError, NotReplicatedError, ModuleVersionError, LostError, MIN_MODULE_VERSION,
} = require("..");
const { Server, eventually, within, aborted } = require("./helpers");

// A server replicating `master`, connected and in sync (a bounded while).
async function replicaOf(t, master) {
  const replica = await Server.start(t);
  await replica.do("REPLICAOF", "127.0.0.1", master.port);
  await eventually("the replica is connected and in sync", async () =>
    (await master.counter("replication", "connected_slaves")) === 1 &&
    (await replica.do("INFO", "replication")).includes("master_link_status:up"));
  return replica;
}

test("sync: the acquire is answered once a replica holds the grant", async (t) => {
  const master = await Server.start(t, ["--repl-diskless-sync-delay", "0"]);
  const replica = await replicaOf(t, master);
  const locks = new Locks(await master.client());
  // Generous timeouts: a slow machine takes longer, the test does not fail.
  const lock = await locks.acquire("synced", 30000, { sync: { replicas: 1, timeout: 10000 } });
  assert.equal(lock.session, null, "a lock taken with sync keeps its own watchdog (a keepalive carries no SYNC)");
  const onReplica = await replica.info("synced");
  assert.ok(onReplica && onReplica.fence === lock.fence, "the replica holds the grant when the acquire returned");
  await lock.extend(30000); // an extend with SYNC, answered with the replica
  assert.equal(await lock.release(), true);
});

test("sync: NOSYNC undoes the grant and is a NotReplicatedError", async (t) => {
  const server = await Server.start(t);
  const locks = new Locks(await server.client());
  const sync = { replicas: 1, timeout: 100 }; // no replica: SYNC 1 runs out
  const refused = (err) => {
    assert.ok(err instanceof NotReplicatedError, `want a NotReplicatedError, got ${err}`);
    assert.ok(!(err instanceof NotAcquiredError), "told apart from a busy lock");
    assert.equal(err.acked, 0);
    assert.equal(err.wanted, 1);
    assert.equal(err.undone, true);
    return true;
  };
  await assert.rejects(locks.acquire("unsynced", 30000, { sync }), refused);
  assert.equal(await server.info("unsynced"), null, "the grant was undone: nothing is held");
  await assert.rejects(locks.acquire("unsynced", 30000, { sync, wait: 1000 }), refused);
  assert.equal(await server.info("unsynced"), null, "with wait: nothing is held");
  await assert.rejects(locks.acquireMany(["{u}a", "{u}b"], 30000, { sync }), refused);
  assert.equal(await server.info("{u}a"), null);
  assert.equal(await server.info("{u}b"), null);
});

test("sync: bad arguments are refused before anything is sent", async (t) => {
  const server = await Server.start(t);
  const locks = new Locks(await server.client());
  for (const sync of [{ replicas: 1001, timeout: 100 }, { replicas: -1, timeout: 100 }, { replicas: 1, timeout: 0 }, { replicas: 1, timeout: 10000 }, 1]) {
    await assert.rejects(locks.acquire("k", 10000, { sync }), (err) => err instanceof RangeError || err instanceof TypeError);
  }
  assert.equal(await server.info("k"), null);
});

test("acquireMany: all or nothing, one fence, released together", async (t) => {
  const server = await Server.start(t);
  const locks = new Locks(await server.client());
  const keys = ["{order}stock", "{order}payment", "{order}mail"];
  const busy = await locks.acquire(keys[1], 10000);
  await assert.rejects(locks.acquireMany(keys, 10000), NotAcquiredError);
  assert.equal(await server.info(keys[0]), null, "a refused multi-key acquire grants no key");
  assert.equal(await server.info(keys[2]), null);
  await busy.release();
  const lock = await locks.acquireMany(keys, 10000);
  assert.deepEqual(lock.keys, keys);
  assert.equal(lock.key, keys[0]);
  assert.ok(lock.fence > busy.fence, "the one fence is above every earlier one");
  for (const key of keys) assert.equal((await server.info(key)).fence, lock.fence, `${key} has the one fence`);
  await assert.rejects(lock.guard("SET", "{order}x", "1"), TypeError);
  await assert.rejects(locks.acquireMany(["a", "a"], 1000), RangeError);
  assert.equal(await lock.release(), true, "every key given back");
  for (const key of keys) assert.equal(await server.info(key), null);
  assert.equal(await lock.release(), false, "a second release: already gone");
});

for (const keepalive of ["session", "watchdog"]) {
  test(`acquireMany: a DEL of one key loses the lock (keepalive ${keepalive})`, async (t) => {
    const server = await Server.start(t);
    const locks = new Locks(await server.client(), { keepalive });
    const keys = ["{j}a", "{j}b", "{j}c"];
    const lock = await locks.acquireMany(keys, 3000);
    assert.equal(lock.session !== null, keepalive === "session");
    await server.do("DEL", keys[1]);
    await within("the loss of one key is the lock's", aborted(lock.signal));
    assert.ok(lock.lostError instanceof LostError);
    assert.equal(lock.lostError.reason, "refused");
    // The other keys are still held: the release gives them back, and says
    // that not every key was.
    assert.equal(await lock.release(), false);
    assert.equal(await server.info(keys[0]), null);
    assert.equal(await server.info(keys[2]), null);
  });
}

// A driver that answers MODULE LIST with `modules`, and counts commands.
function fakeDriver(modules) {
  const driver = {
    sent: [],
    async send(key, args) {
      driver.sent.push(args[0]);
      if (args[0] === "MODULE") return modules;
      if (args[0] === "LOCK.INFO") return null;
      throw new Error("not expected");
    },
    async dedicated() {
      throw new Error("not expected");
    },
  };
  return driver;
}

const moduleEntry = (name, ver) => ["name", name, "ver", ver, "path", "/x.so", "args", []];

test("an old or missing lock module is refused, naming both versions", async () => {
  assert.equal(MIN_MODULE_VERSION, 400);
  for (const [modules, found, says] of [
    [[moduleEntry("lock", 1)], 1, ["1 (before 0.4.0)", "0.4.0 (400)"]],
    [[moduleEntry("lock", 399)], 399, ["399", "0.4.0 (400)"]],
    [[moduleEntry("search", 20000)], 0, ["no lock module", "0.4.0 (400)"]],
    [[], 0, ["no lock module"]],
  ]) {
    const driver = fakeDriver(modules);
    const locks = new Locks(driver);
    await assert.rejects(locks.acquire("k", 1000), (err) => {
      assert.ok(err instanceof ModuleVersionError, `got ${err}`);
      assert.equal(err.found, found);
      assert.equal(err.needed, 400);
      for (const part of says) assert.ok(err.message.includes(part), `${err.message} says ${part}`);
      return true;
    });
    assert.deepEqual(driver.sent, ["MODULE"], "a refused server is sent MODULE LIST only");
  }
});

test("the module is checked once per Locks", async (t) => {
  const driver = fakeDriver([moduleEntry("other", 5), { name: "lock", ver: 10203 }]);
  const locks = new Locks(driver);
  for (let i = 0; i < 3; i++) assert.equal(await locks.info("k"), null);
  assert.deepEqual(driver.sent, ["MODULE", "LOCK.INFO", "LOCK.INFO", "LOCK.INFO"]);
  // And the real module built here passes.
  const server = await Server.start(t);
  const real = new Locks(await server.client());
  assert.equal(await real.info("k"), null);
});

test("a MODULE LIST refused by ACL skips the check", async (t) => {
  const server = await Server.start(t);
  await server.do("ACL", "SETUSER", "worker", "on", ">pw", "~*", "+@all", "-module");
  const locks = new Locks(await server.client({ username: "worker", password: "pw" }), { keepalive: "watchdog" });
  const lock = await locks.acquire("k", 10000);
  assert.equal(await lock.release(), true);
});
