"use strict";

const { test } = require("node:test");
const assert = require("node:assert/strict");
const { Locks, NotAcquiredError, LostError, ServerError, LimitError, TimeoutError } = require("..");
const { Server, eventually, within, aborted, sleep } = require("./helpers");

const UUID4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function setup(t, options) {
  const server = await Server.start(t);
  const locks = new Locks(await server.client(), options);
  return { server, locks };
}

test("acquire, extend, release", async (t) => {
  const { server, locks } = await setup(t);
  const lock = await locks.acquire("billing", 10000, { owner: "worker-1" });
  assert.match(lock.token, UUID4, "the token is a UUIDv4 drawn by the client");
  const info = await locks.info("billing");
  assert.equal(info.fence, lock.fence);
  assert.equal(info.owner, "worker-1");
  assert.ok(info.lease > 0, "attached to the session's lease");
  // The server holds it under the client's token: TOKEN was sent.
  assert.equal(await server.do("LOCK.EXTEND", "billing", lock.token, 10000), 1);
  await assert.rejects(locks.acquire("billing", 1000), NotAcquiredError);
  await lock.extend(20000);
  assert.ok((await server.do("PTTL", "billing")) > 10000, "extend(20000) sets the lease");
  assert.equal(await lock.release(), true);
  assert.equal(await server.info("billing"), null);
  assert.equal(lock.lost, false, "a released lock is not lost");
  assert.equal(await lock.release(), false, "a second release: already gone");
  const next = await locks.acquire("billing", 1000);
  assert.ok(next.fence > lock.fence, "the next holder's fence is larger");
  await next.release();
});

test("the watchdog keeps the lock past its ttl", async (t) => {
  const { server, locks } = await setup(t, { keepalive: "watchdog" });
  const lock = await locks.acquire("job", 600);
  assert.equal(lock.session, null, "keepalive watchdog: a watchdog, not a session");
  await sleep(2000); // more than three ttls
  assert.equal(lock.lost, false);
  const info = await server.info("job");
  assert.equal(info.fence, lock.fence);
  assert.ok(info.extends >= 2, `extended ${info.extends} times`);
  assert.equal(await lock.release(), true);
});

test("lost on expiry without the watchdog: the signal fires", async (t) => {
  const { locks } = await setup(t);
  const lock = await locks.acquire("job", 300, { watchdog: false });
  await within("the signal is aborted at the deadline", aborted(lock.signal));
  assert.ok(lock.signal.reason instanceof LostError);
  assert.equal(lock.signal.reason.reason, "expired");
  assert.equal(lock.lost, true);
});

test("lost when the key is deleted", async (t) => {
  const { server, locks } = await setup(t);
  const lock = await locks.acquire("job", 1000);
  await server.do("DEL", "job");
  await within("the watchdog's extend is refused", aborted(lock.signal));
  assert.equal(lock.lostError.reason, "refused");
});

// A held key overwritten with another type (SET k v): every command on it
// answers WRONGTYPE, which says the lock is gone as surely as LOST does.
// The holder hears it as "refused" at the next keepalive or extend (ttl/3),
// as for a DEL: not as "expired" at the deadline, nor never.
for (const keepalive of ["session", "watchdog"]) {
  test(`lost when the key is overwritten (keepalive ${keepalive})`, async (t) => {
    const { server, locks } = await setup(t, { keepalive });
    const ttl = 3000;
    const lock = await locks.acquire("job", ttl);
    assert.equal(lock.session !== null, keepalive === "session");
    await server.do("SET", "job", "v");
    const overwritten = Date.now();
    await within("the overwrite is noticed", aborted(lock.signal));
    const took = Date.now() - overwritten;
    t.diagnostic(`${keepalive}: lost ${took} ms after the overwrite (ttl ${ttl} ms)`);
    assert.ok(lock.lostError instanceof LostError);
    assert.equal(lock.lostError.reason, "refused");
    assert.equal(lock.signal.reason, lock.lostError);
    // Noticed at the next keepalive (ttl/3): well within the ttl, with room for a slow machine.
    assert.ok(took < ttl + 2000, `lost ${took} ms after the overwrite: want within the ttl`);
    assert.equal(await lock.release(), false, "release after the overwrite: already gone");
    assert.equal(await server.do("GET", "job"), "v", "the overwriting value stays");
  });

  test(`guard and release after an overwrite (keepalive ${keepalive})`, async (t) => {
    const { server, locks } = await setup(t, { keepalive });
    const lock = await locks.acquire("{billing}:lock", 30000);
    await server.do("SET", "{billing}:list", "x");
    await assert.rejects(lock.guard("LPUSH", "{billing}:list", "y"), (err) => err instanceof ServerError && err.code === "WRONGTYPE");
    assert.equal(lock.lost, false, "the command's own WRONGTYPE keeps the lock");
    await server.do("SET", "{billing}:lock", "v");
    await assert.rejects(lock.guard("INCR", "{billing}:total"), (err) => {
      assert.ok(err instanceof LostError, `want a LostError, got ${err}`);
      assert.equal(err.reason, "refused");
      return true;
    });
    assert.equal(lock.signal.aborted, true, "guard on the overwritten lock key marks the lock lost");
    assert.equal(lock.lostError.reason, "refused");
    assert.equal(await server.do("EXISTS", "{billing}:total"), 0, "the guarded command did not run");
    assert.equal(await lock.release(), false);
    // Released before any loss was noticed (no keepalive yet).
    const other = await locks.acquire("other", 30000);
    await server.do("SET", "other", "v");
    assert.equal(await other.release(), false, "release of an overwritten lock: already gone");
    const permits = await locks.semaphore("renders", 2).acquire(30000);
    await server.do("SET", "renders", "v");
    assert.equal(await permits.release(), false, "release of overwritten permits: already gone");
  });
}

for (const how of ["killed", "paused"]) {
  test(`lost when the server is ${how}`, async (t) => {
    const { server, locks } = await setup(t);
    const lock = await locks.acquire("job", 1000);
    if (how === "killed") server.kill();
    else server.pause(); // extends hang: the deadline still comes
    await within("the lock is declared lost", aborted(lock.signal));
    assert.equal(lock.lostError.reason, "expired");
  });
}

test("guard", async (t) => {
  const { server, locks } = await setup(t);
  const lock = await locks.acquire("{billing}:lock", 10000);
  assert.equal(await lock.guard("INCRBY", "{billing}:total", 6000), 6000);
  await assert.rejects(lock.guard("BLPOP", "{billing}:list", 1), (err) => err instanceof ServerError && !(err instanceof LostError));
  await assert.rejects(lock.guard("LPUSH", "{billing}:total", "x"), (err) => err instanceof ServerError && err.code === "WRONGTYPE");
  assert.equal(lock.lost, false, "the command's own errors keep the lock");
  await server.do("DEL", "{billing}:lock");
  await assert.rejects(lock.guard("INCRBY", "{billing}:total", 999999), (err) => {
    assert.ok(err instanceof LostError);
    assert.ok(!err.message.includes(lock.token), "the error names the token");
    return true;
  });
  assert.equal(lock.signal.aborted, true, "a LOST reply marks the lock lost");
  assert.equal(await server.do("GET", "{billing}:total"), "6000", "the refused write changed nothing");
});

for (const keepalive of ["auto", "watchdog"]) {
  test(`a waiter is handed the lock on release, and pins its lease (keepalive ${keepalive})`, async (t) => {
    const { server, locks } = await setup(t, { keepalive });
    const holder = await locks.acquire("job", 10000);
    const waiting = locks.acquire("job", 10000, { wait: 10000 });
    await eventually("the waiter queues", async () => (await server.queued("job")) === 1);
    assert.equal(await holder.release(), true);
    const waiter = await within("the waiter is handed the lock", waiting);
    assert.ok(waiter.fence > holder.fence);
    const info = await server.info("job");
    assert.equal(info.fence, waiter.fence);
    if (keepalive === "watchdog") {
      assert.ok(info.extends >= 1, "one extend right after the WAIT grant");
    } else {
      // Attached to the session, which was kept alive while it waited.
      assert.ok(info.lease > 0 && waiter.session !== null && waiter.session === holder.session, "attached to the session");
    }
    await waiter.release();
  });
}

test("a wait runs out", async (t) => {
  const { server, locks } = await setup(t);
  await locks.acquire("job", 10000);
  await assert.rejects(locks.acquire("job", 1000, { wait: 200 }), NotAcquiredError);
  assert.equal(await server.queued("job"), 0);
});

test("an aborted wait leaves the queue, and is never granted", async (t) => {
  const { server, locks } = await setup(t);
  const holder = await locks.acquire("job", 10000);
  const controller = new AbortController();
  const waiting = locks.acquire("job", 10000, { wait: 60000, signal: controller.signal });
  await eventually("the waiter queues", async () => (await server.queued("job")) === 1);
  controller.abort();
  await assert.rejects(within("the aborted acquire settles", waiting), (err) => err.name === "AbortError");
  await eventually("the waiter leaves the queue", async () => (await server.queued("job")) === 0);
  await holder.release();
  assert.equal(await server.info("job"), null, "the lock went to a waiter that had gone");
});

// A driver that loses the next command matching `lose`: after sending it
// (a lost reply) or before (a failed write).
function faulty(driver, lose) {
  return {
    hits: 0,
    async send(key, args) {
      const verdict = lose(args);
      if (verdict) {
        this.hits++;
        if (verdict === "sent") await driver.send(key, args);
        throw Object.assign(new Error("read ECONNRESET (injected)"), { code: "ECONNRESET" });
      }
      return driver.send(key, args);
    },
    dedicated: (key) => driver.dedicated(key),
  };
}

test("acquire releases with its token after a lost reply", async (t) => {
  const { server, locks } = await setup(t);
  const driver = faulty(locks.driver, (args) => args[0] === "LOCK.ACQUIRE" && "sent");
  await assert.rejects(new Locks(driver).acquire("job", 10000), /ECONNRESET/);
  assert.equal(driver.hits, 1);
  assert.equal(await server.info("job"), null, "the lock granted under the lost reply is released");
});

test("release is retried after a connection error, and resends", async (t) => {
  const { server, locks } = await setup(t);
  let failNext = false;
  const driver = faulty(locks.driver, (args) => args[0] === "LOCK.RELEASE" && failNext && !(failNext = false) && "unsent");
  const lock = await new Locks(driver).acquire("job", 10000, { watchdog: false });
  failNext = true;
  await assert.rejects(lock.release(), /ECONNRESET/);
  assert.equal((await server.info("job")).fence, lock.fence, "the failed release did not release");
  assert.equal(await lock.release(), true, "the retry sends the release again");
  assert.equal(await server.info("job"), null);
  assert.equal(driver.hits, 1);
});

test("using: the routine's signal fires on loss", async (t) => {
  const { server, locks } = await setup(t);
  const fence = await locks.using("job", 10000, async (signal, lock) => {
    await assert.rejects(locks.using("job", 1000, async () => {}), NotAcquiredError);
    assert.equal(signal.aborted, false);
    return lock.fence;
  });
  assert.ok(fence > 0);
  assert.equal(await server.info("job"), null, "released after the routine");
  await assert.rejects(
    locks.using("job", 1000, { wait: 1000 }, async (signal) => {
      await server.do("DEL", "job");
      await within("the routine's signal is aborted", aborted(signal));
    }),
    LostError,
  );
  const mine = new Error("the work failed");
  await assert.rejects(locks.using("job", 1000, async () => { throw mine; }), (err) => err === mine);
  assert.equal(await server.info("job"), null);
});

// The server dies while the routine runs: the routine's signal fires at
// the deadline less the margin, and using() rejects with that loss, at
// once, not with the release's TimeoutError a commandTimeout later.
for (const keepalive of ["session", "watchdog"]) {
  test(`using: the loss wins when the server dies (keepalive ${keepalive})`, async (t) => {
    const { server, locks } = await setup(t, { keepalive });
    let killed = 0;
    let signalled = 0;
    const using = locks.using("job", 1000, async (signal) => {
      server.crash();
      killed = Date.now();
      await within("the routine's signal is aborted", aborted(signal));
      signalled = Date.now();
    });
    await within("using settles", assert.rejects(using, (err) => {
      assert.ok(err instanceof LostError, `want the LostError, got ${err && err.name}: ${err && err.message}`);
      assert.ok(!(err instanceof TimeoutError));
      assert.equal(err.reason, "expired");
      return true;
    }), 20000);
    const settled = Date.now();
    t.diagnostic(`${keepalive}: signal ${signalled - killed} ms, using() rejected ${settled - killed} ms after the kill (ttl 1000 ms, commandTimeout ${locks.commandTimeout} ms)`);
    assert.ok(settled - signalled < locks.commandTimeout, "using() does not wait out the release's commandTimeout");
  });
}

test("bad arguments are refused before anything is sent", async (t) => {
  const { server, locks } = await setup(t);
  await assert.rejects(locks.acquire("k", 0), RangeError);
  await assert.rejects(locks.acquire("k", NaN), TypeError);
  await assert.rejects(locks.acquire("", 1000), TypeError);
  await assert.rejects(locks.acquire("k", 1000, { wait: 31536000001 }), RangeError);
  await assert.rejects(locks.acquire("k", 1000, { owner: "" }), RangeError);
  assert.throws(() => locks.semaphore("s", 0), RangeError);
  await assert.rejects(locks.semaphore("s", 2).acquire(1000, { count: 3 }), RangeError);
  const client = await server.client();
  assert.throws(() => new Locks(client, { safetyMargin: 0.5 }), RangeError);
  assert.equal(await server.do("DBSIZE"), 0);
});

test("a LIMIT reply is a LimitError", async (t) => {
  const { server, locks } = await setup(t);
  await server.do("CONFIG", "SET", "lock.max-extends", "1");
  const lock = await locks.acquire("job", 10000, { watchdog: false });
  await lock.extend();
  await assert.rejects(lock.extend(), LimitError);
  assert.equal(lock.lost, false, "still held until its deadline");
});
