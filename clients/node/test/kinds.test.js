"use strict";

const { test } = require("node:test");
const assert = require("node:assert/strict");
const { Locks, NotAcquiredError, LostError, ServerError } = require("..");
const { Server, eventually, within, aborted } = require("./helpers");

async function setup(t) {
  const server = await Server.start(t);
  return { server, locks: new Locks(await server.client()) };
}

test("shared locks: readers together, a writer alone, no barging past a queued writer", async (t) => {
  const { server, locks } = await setup(t);
  const first = await locks.acquire("catalog", 10000, { shared: true });
  const second = await locks.acquire("catalog", 10000, { shared: true });
  assert.ok(first.shared && second.fence > first.fence && first.token !== second.token);
  const info = await locks.info("catalog");
  assert.equal(info.holders, 2);
  assert.equal(info.mode, "shared");
  await assert.rejects(locks.acquire("catalog", 1000), NotAcquiredError);
  await assert.rejects(first.guard("SET", "catalog:items", 13), (err) => err instanceof ServerError && !(err instanceof LostError));
  assert.equal(first.lost, false, "a reader's refused write keeps the lock");
  const writing = locks.acquire("catalog", 10000, { wait: 10000 });
  await eventually("the writer queues", async () => (await server.queued("catalog")) === 1);
  await assert.rejects(locks.acquire("catalog", 1000, { shared: true }), NotAcquiredError);
  assert.equal(await first.release(), true);
  assert.equal(await server.queued("catalog"), 1, "one reader left: the writer still waits");
  assert.equal(await second.release(), true);
  const writer = await within("the writer is handed the lock", writing);
  assert.ok(!writer.shared && writer.fence > second.fence);
  assert.equal(await writer.guard("SET", "catalog:items", 13), "OK");
  await writer.release();
});

test("semaphore", async (t) => {
  const { server, locks } = await setup(t);
  const renders = locks.semaphore("renders", 3);
  const one = await renders.acquire(1000);
  const two = await renders.acquire(10000, { count: 2 });
  assert.equal(two.count, 2);
  assert.ok(two.fence > one.fence);
  await assert.rejects(renders.acquire(1000), NotAcquiredError);
  const info = await renders.info();
  assert.deepEqual([info.limit, info.used, info.holders], [3, 3, 2]);
  await assert.rejects(two.guard("GET", "x"), TypeError);
  await assert.rejects(locks.semaphore("renders", 4).acquire(1000), (err) => err instanceof ServerError && err.code === "ERR");
  await assert.rejects(locks.acquire("renders", 1000), (err) => err instanceof ServerError && err.code === "WRONGTYPE");
  const waiting = renders.acquire(1000, { count: 2, wait: 10000 });
  await eventually("the waiter queues", async () => (await server.queued("renders")) === 1);
  assert.equal(await two.release(), true);
  const got = await within("the waiter is handed two permits", waiting);
  assert.equal(got.count, 2);
  await server.do("DEL", "renders");
  await within("the permits are lost", aborted(got.signal));
  await within("every holder sees it", aborted(one.signal));
  assert.equal(one.lostError.reason, "refused");
  assert.equal(await got.release(), false);
  const value = await renders.using(1000, async (signal, permits) => permits.count);
  assert.equal(value, 1);
});

test("election: campaign, observe, resign, deposed", async (t) => {
  const { server, locks } = await setup(t);
  const controller = new AbortController();
  const a = locks.election("scheduler:leader", 10000, { owner: "host-a", observeTimeout: 1000 });
  const changes = a.observe({ signal: controller.signal })[Symbol.asyncIterator]();
  const next = async (what) => {
    const { value, done } = await within(what, changes.next());
    assert.equal(done, false, what);
    return value;
  };
  assert.equal(await next("the leader now"), null);
  const leaderA = await a.campaign();
  let seen = await next("the observer sees host-a");
  assert.deepEqual([seen.owner, seen.fence], ["host-a", leaderA.fence]);
  assert.equal((await a.leader()).owner, "host-a");
  const b = locks.election("scheduler:leader", 1000, { owner: "host-b" });
  const electing = b.campaign();
  await eventually("host-b queues", async () => (await server.queued("scheduler:leader")) === 1);
  await assert.rejects(locks.election("scheduler:leader", 1000).campaign({ timeout: 200 }), NotAcquiredError);
  assert.equal(await leaderA.release(), true, "resigns: host-b leads");
  const leaderB = await within("host-b is elected", electing);
  seen = await next("the observer sees host-b");
  assert.deepEqual([seen.owner, seen.fence], ["host-b", leaderB.fence]);
  assert.ok(leaderB.fence > leaderA.fence);
  await server.do("DEL", "scheduler:leader"); // deposed
  await within("host-b learns it is deposed", aborted(leaderB.signal));
  assert.equal(await next("the observer sees nobody"), null);
  controller.abort();
  const { done } = await within("the observer ends when aborted", changes.next());
  assert.equal(done, true);
  await eventually("the observer's connection is closed", async () => (await server.counter("lock", "lock_observers")) === 0);
});

test("an observer's connection error ends it with that error", async (t) => {
  const { server, locks } = await setup(t);
  const changes = locks.election("leader", 10000).observe()[Symbol.asyncIterator]();
  assert.equal((await within("the leader now", changes.next())).value, null);
  const pending = changes.next();
  await eventually("the observer blocks", async () => (await server.counter("lock", "lock_observers")) === 1);
  await server.do("CLIENT", "KILL", "TYPE", "normal");
  await assert.rejects(within("the error", pending));
});
