"use strict";

const { test } = require("node:test");
const assert = require("node:assert/strict");
const { Locks, ServerError, keySlot } = require("..");
const { startCluster, eventually, within, sleep } = require("./helpers");

// The node whose LOCK.INFO key shows `fence`; the others answer MOVED.
async function holder(nodes, key, fence) {
  let found = null;
  for (const node of nodes) {
    try {
      const info = await node.info(key);
      assert.ok(info !== null && found === null, `${key} on ${node.port}`);
      assert.equal(info.fence, fence);
      found = node;
    } catch (err) {
      if (!String(err.message).startsWith("MOVED ")) throw err;
    }
  }
  assert.ok(found, `no node holds ${key}`);
  return found;
}

test("Redis Cluster: routing by key, guard with a hash tag, a wait on the key's master, one session lease per master", async (t) => {
  const { nodes, cluster } = await startCluster(t);
  const locks = new Locks(cluster);
  for (const key of ["foo", "{user1000}.following", "job:7", "\u00e9t\u00e9"]) {
    assert.equal(keySlot(key), await nodes[0].do("CLUSTER", "KEYSLOT", key), `the slot of ${key}`);
  }
  const used = new Set();
  for (let i = 0; i < 24; i++) {
    const lock = await locks.acquire(`job:${i}`, 10000);
    used.add((await holder(nodes, `job:${i}`, lock.fence)).port);
    assert.equal(await lock.release(), true);
  }
  assert.equal(used.size, nodes.length, "24 keys on every master");

  const billing = await locks.acquire("{billing}:lock", 10000);
  assert.equal(await billing.guard("INCRBY", "{billing}:total", 6000), 6000);
  await assert.rejects(billing.guard("SET", "other", 1), (err) => err instanceof ServerError && err.code === "CROSSSLOT");
  await billing.release();

  const first = await locks.acquire("leader", 10000);
  const node = await holder(nodes, "leader", first.fence);
  const waiting = locks.acquire("leader", 10000, { wait: 10000 });
  await eventually("the waiter queues on the key's master", async () => (await node.queued("leader")) === 1);
  const changes = locks.election("leader", 10000).observe()[Symbol.asyncIterator]();
  assert.equal((await within("the leader now", changes.next())).value.fence, first.fence);
  assert.equal(await first.release(), true);
  const next = await within("the waiter is handed the lock", waiting);
  assert.ok(next.fence > first.fence);
  assert.equal((await within("the observer sees it", changes.next())).value.fence, next.fence);
  await changes.return();
  await next.release();

  // One session lease per master: each session's holds on its node, its
  // keepalive sent there, no extend anywhere.
  const ttl = 300;
  const leasesBefore = await Promise.all(nodes.map((n) => n.counter("lock", "lock_leases"))); // the 10 s ttl's own
  const sessions = new Map();
  const held = [];
  for (let i = 0; i < 24; i++) {
    const lock = await locks.acquire(`held:${i}`, ttl);
    const node = await holder(nodes, `held:${i}`, lock.fence);
    assert.ok(lock.session !== null && (sessions.get(lock.session) || node) === node, "a session's holds are on its node");
    sessions.set(lock.session, node);
    held.push(lock);
  }
  assert.equal(sessions.size, nodes.length, "one session per master");
  for (const [i, node] of nodes.entries()) {
    assert.equal((await node.counter("lock", "lock_leases")) - leasesBefore[i], 1, `one new lease on ${node.port}`);
  }
  for (const [session, node] of sessions) assert.notEqual(await node.do("LOCK.LEASE", "INFO", session.id), null);
  await sleep(3 * ttl);
  for (const lock of held) {
    assert.equal(lock.lost, false, `${lock.key} is kept`);
    assert.equal(await lock.release(), true);
  }
  for (const node of nodes) {
    assert.ok((await node.counter("lock", "lock_keepalives")) >= 2, `keepalives on ${node.port}`);
    assert.ok(!(await node.do("INFO", "commandstats")).includes("cmdstat_lock.extend:"), `no extend on ${node.port}`);
  }
});
