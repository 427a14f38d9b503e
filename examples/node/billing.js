// The nightly billing job with redis-lock from Node, over node-redis 4
// (`redis` on npm) and the raw commands, as docs/clients.md shows them.
//
// Several workers try to run the job at once; exactly one gets the lock
// (LOCK.ACQUIRE with a token it chose) and runs it, extending the lease after
// each invoice (LOCK.EXTEND) because the job outlasts the ttl, and releases it
// at the end (LOCK.RELEASE). Every ledger write carries the fence, and the
// ledger refuses stale fences. The day's total, a Redis key next to the lock
// (`{billing}:total:<night>`, the same hash tag), is written only under the
// lock, with LOCK.GUARD: a stale holder's write is refused by the server
// (`LOST`) and changes nothing. An auditor waits for the lock (LOCK.ACQUIRE …
// WAIT) on a connection of its own, and is handed the lock when the job
// releases it.
//
// Offline, from Debian's nodejs and node-redis (with npm: `npm install redis@4`):
//
//   redis-server --port 6379 --loadmodule target/debug/libredis_lock.so &
//   REDIS_URL=redis://127.0.0.1:6379/ NODE_PATH=/usr/share/nodejs node examples/node/billing.js
//
// Exits non-zero if the outcome is not the one described (CI runs it).
"use strict";

const { createClient, ErrorReply } = require("redis");
const { randomUUID } = require("crypto");
const { performance } = require("perf_hooks");
const { setTimeout: sleep } = require("timers/promises");

const URL = process.env.REDIS_URL || "redis://127.0.0.1:6379/";
const TTL_MS = 600; // the job takes longer: the holder extends
const MARGIN_MS = 100; // stop this long before the lease's end
const INVOICE_GAP_MS = 250; // the work before each invoice
const WAIT_MS = 5000; // the auditor's WAIT
const WORKERS = 5;
const NIGHTS = ["2026-11-28", "2026-11-29"];
const INVOICES = [["acme", 1000], ["globex", 2000], ["initech", 3000]];
const NIGHT_TOTAL = 6000; // the sum of the invoices, in cents

// The lock key and the total key share the hash tag `{billing}`: in a
// cluster, LOCK.GUARD goes to the lock key's master, which must own the total
// too.
const lockKey = (night) => `{billing}:nightly:${night}`;
const totalKey = (night) => `{billing}:total:${night}`;

// The lease is gone (an extend answered 0, the deadline passed, or a guarded
// command was refused with LOST): stop working.
class Lost extends Error {}

// node-redis pipelines every command of a client on one connection: a client
// per worker (a process in real life), and one more for each waiting acquire.
async function connect(socket = {}) {
  const client = createClient({ url: URL, socket });
  client.on("error", () => {}); // a failed command rejects its own promise
  await client.connect();
  return client;
}

// A lease on one key. validUntil is sent + ttl on the monotonic clock: never
// after the server's deadline.
class Lease {
  constructor(client, key, token, fence, validUntil) {
    Object.assign(this, { client, key, token, fence, validUntil });
  }

  // LOCK.EXTEND key token ttl: 1 renews the lease from the send, 0 means it is gone.
  async extend() {
    const sent = performance.now();
    if ((await this.client.sendCommand(["LOCK.EXTEND", this.key, this.token, String(TTL_MS)])) === 0) {
      throw new Lost("an extend answered 0");
    }
    this.validUntil = sent + TTL_MS;
  }

  live() {
    return this.validUntil - performance.now() > MARGIN_MS;
  }

  // LOCK.GUARD key token command ...: the command's own reply, or Lost when
  // the token no longer holds the lock, and then nothing ran.
  async guard(...command) {
    try {
      return await this.client.sendCommand(["LOCK.GUARD", this.key, this.token, ...command.map(String)]);
    } catch (err) {
      if (err instanceof ErrorReply && err.message.startsWith("LOST ")) {
        throw new Lost(err.message.slice("LOST ".length));
      }
      throw err;
    }
  }

  // LOCK.RELEASE key token: true released, false already gone.
  async release() {
    return (await this.client.sendCommand(["LOCK.RELEASE", this.key, this.token])) === 1;
  }
}

// LOCK.ACQUIRE key ttl TOKEN <token>: a Lease, or null when another token
// holds the key. The token is always the client's, so that a lost reply can
// still be released or extended with it.
async function acquire(client, key) {
  const token = randomUUID();
  const sent = performance.now();
  const reply = await client.sendCommand(["LOCK.ACQUIRE", key, String(TTL_MS), "TOKEN", token]);
  if (reply === null) return null;
  return new Lease(client, key, token, reply[1], sent + TTL_MS); // fence < 2^53: an exact Number
}

// LOCK.ACQUIRE … WAIT ms on a connection of its own (it blocks the connection
// it runs on), with no reconnect (a re-sent WAIT would queue again, at the
// tail) and a read timeout longer than the wait: node-redis 4 has none, so a
// timer closes the connection, which takes the waiter out of the server's
// queue. The lease is then used on `client`; null when the wait ran out.
async function acquireWaiting(client, key, waitMs) {
  const waiter = await connect({ reconnectStrategy: () => new Error("a waiter does not reconnect") });
  const token = randomUUID();
  const sent = performance.now();
  const command = waiter.sendCommand(["LOCK.ACQUIRE", key, String(TTL_MS), "TOKEN", token, "WAIT", String(waitMs)]);
  let timer;
  const readTimeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no reply within ${waitMs + 5000} ms`)), waitMs + 5000);
  });
  try {
    const reply = await Promise.race([command, readTimeout]);
    // Granted at some point after the send: the lease counts from there.
    return reply === null ? null : new Lease(client, key, token, reply[1], sent + TTL_MS);
  } finally {
    clearTimeout(timer);
    command.catch(() => {}); // rejected by the disconnect when the timer won
    await waiter.disconnect();
  }
}

// The ledger stands for the database the job writes to: it keeps the highest
// fence it has accepted and refuses any write with a lower one.
class Ledger {
  constructor() {
    this.highestFence = 0;
    this.invoices = new Map(); // "night customer" -> fence
  }

  writeInvoice(fence, night, customer) {
    if (fence < this.highestFence) {
      throw new Error(`stale fence ${fence} (seen ${this.highestFence}): write refused`);
    }
    this.highestFence = fence;
    this.invoices.set(`${night} ${customer}`, fence);
  }
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

// One worker's run of the night's job: the fence if it ran it, null if
// another worker holds the lock. onAcquired(fence) when it gets the lock.
async function worker(id, client, night, ledger, onAcquired) {
  try {
    const lease = await acquire(client, lockKey(night));
    if (lease === null) {
      console.log(`[${night}] worker ${id}: another worker is running it, skipping`);
      return null;
    }
    onAcquired(lease.fence);
    for (const [customer, cents] of INVOICES) {
      await sleep(INVOICE_GAP_MS); // three of them outlast the ttl: extend after each
      if (!lease.live()) throw new Lost("the deadline passed");
      ledger.writeInvoice(lease.fence, night, customer);
      // Added to the total only if the lease is live on the server, in the
      // same atomic step as the check.
      await lease.guard("INCRBY", totalKey(night), cents);
      await lease.extend();
    }
    await lease.release();
    console.log(`[${night}] worker ${id}: ran the billing job with fence ${lease.fence}`);
    return lease.fence;
  } finally {
    await client.quit();
  }
}

// The auditor waits for the night's lock while the job holds it; the job's
// release hands it the lock, with a larger fence. It then reads the total.
async function audit(night, jobAcquired) {
  const jobFence = await jobAcquired;
  const client = await connect();
  try {
    const started = performance.now();
    const lease = await acquireWaiting(client, lockKey(night), WAIT_MS);
    check(lease !== null, `[${night}] auditor: not handed the lock within ${WAIT_MS} ms`);
    check(lease.fence > jobFence, `[${night}] auditor: fence ${lease.fence} is not above the job's ${jobFence}`);
    const total = Number(await client.get(totalKey(night)));
    await lease.release();
    const waited = Math.round(performance.now() - started);
    console.log(`[${night}] auditor: handed the lock on release after waiting ${waited} ms, fence ${lease.fence}, total ${total}`);
  } finally {
    await client.quit();
  }
}

// All workers try at the same moment, as cron would start them; once one
// holds the lock, the auditor queues. The fence of the one that ran the job.
async function runNight(ledger, night) {
  let onAcquired, noneAcquired;
  const jobAcquired = new Promise((resolve, reject) => [onAcquired, noneAcquired] = [resolve, reject]);
  const clients = await Promise.all(Array.from({ length: WORKERS }, () => connect()));
  const allWorkers = Promise.all(clients.map((client, id) => worker(id, client, night, ledger, onAcquired)));
  // Too late to matter once a worker got the lock.
  allWorkers.then(() => noneAcquired(new Error(`[${night}] no worker got the lock`)), () => {});
  const [fences] = await Promise.all([allWorkers, audit(night, jobAcquired)]);
  const ran = fences.filter((fence) => fence !== null);
  check(ran.length === 1, `[${night}] exactly one worker runs the job, not ${ran.length}`);
  return ran[0];
}

// A rerun of the night gets the lock with a short lease and stalls (a GC
// pause, a stopped VM) past it, without extending. When it wakes up, its
// guarded write to the total is refused by the server: nothing is written.
async function staleHolder(client, night) {
  const stale = await acquire(client, lockKey(night));
  check(stale !== null, "the night's job is over: the lock is free");
  await sleep(TTL_MS + 200);
  try {
    await stale.guard("INCRBY", totalKey(night), 999999);
    throw new Error("a stale holder's guarded write must be refused");
  } catch (err) {
    if (!(err instanceof Lost)) throw err;
    console.log(`stale guarded write to ${totalKey(night)}: refused, LOST (${err.message})`);
  }
  check(!(await stale.release()), "the stale lease was gone");
}

async function main() {
  const client = await connect();
  try {
    // Start from no totals, so that the example can run again on one server.
    await client.del(NIGHTS.map(totalKey));
    const ledger = new Ledger();
    const first = await runNight(ledger, NIGHTS[0]);
    const second = await runNight(ledger, NIGHTS[1]);
    check(second > first, `the later holder has the larger fence: ${first} then ${second}`);
    await staleHolder(client, NIGHTS[1]);
    try {
      ledger.writeInvoice(first, NIGHTS[1], "acme");
      throw new Error("a stale fence must be refused");
    } catch (err) {
      check(err.message.startsWith("stale fence"), err.message);
      console.log(`late write with fence ${first}: ${err.message}`);
    }
    for (const night of NIGHTS) {
      const total = Number(await client.get(totalKey(night)));
      check(total === NIGHT_TOTAL, `total of ${night} is ${total}, not ${NIGHT_TOTAL}`);
      console.log(`total ${totalKey(night)}: ${total}`);
    }
    console.log("node billing example: ok");
  } finally {
    await client.quit();
  }
}

main().catch((err) => {
  console.error(`node billing example: ${err.stack || err}`);
  process.exit(1);
});
