// The nightly billing job with redis-lock from Node, with the package
// redis-lock-client (clients/node, over node-redis 4).
//
// Several workers try to run the job at once; exactly one gets the lock
// (locks.using) and runs it, the client's session keeping the lease alive
// (one LOCK.LEASE KEEPALIVE for all of the client's holds) while the job
// outlasts the ttl, and releases it at the end. Every ledger write carries
// the fence, and the ledger refuses stale fences. The day's total, a Redis
// key next to the lock (`{billing}:total:<night>`, the same hash tag), is
// written only under the lock, with lock.guard (LOCK.GUARD): a stale
// holder's write is refused by the server (`LOST`) and changes nothing. An
// auditor waits for the lock (acquire with `wait`, on a connection of its
// own), and is handed the lock when the job releases it.
//
// Offline, from Debian's nodejs and node-redis, with the package from the
// repository (examples/run-billing.sh links it as target/node_modules/redis-lock-client;
// with npm: `npm install ./clients/node redis@4`):
//
//   redis-server --port 6379 --loadmodule target/debug/libredis_lock.so &
//   REDIS_URL=redis://127.0.0.1:6379/ NODE_PATH=target/node_modules:/usr/share/nodejs node examples/node/billing.js
//
// Exits non-zero if the outcome is not the one described (CI runs it).
"use strict";

const { createClient } = require("redis");
const { Locks, NotAcquiredError, LostError } = require("redis-lock-client");
const { performance } = require("perf_hooks");
const { setTimeout: sleep } = require("timers/promises");

const URL = process.env.REDIS_URL || "redis://127.0.0.1:6379/";
const TTL_MS = 600; // the job takes longer: the session keeps it
const INVOICE_GAP_MS = 250; // the work before each invoice
const WAIT_MS = 5000; // the auditor's wait
const WORKERS = 5;
const NIGHTS = ["2026-11-28", "2026-11-29"];
const INVOICES = [["acme", 1000], ["globex", 2000], ["initech", 3000]];
const NIGHT_TOTAL = 6000; // the sum of the invoices, in cents

// The lock key and the total key share the hash tag `{billing}`: in a
// cluster, LOCK.GUARD goes to the lock key's master, which must own the total
// too.
const lockKey = (night) => `{billing}:nightly:${night}`;
const totalKey = (night) => `{billing}:total:${night}`;

async function connect() {
  const client = createClient({ url: URL });
  client.on("error", () => {}); // a failed command rejects its own promise
  await client.connect();
  return client;
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
async function worker(id, locks, night, ledger, onAcquired) {
  try {
    return await locks.using(lockKey(night), TTL_MS, async (signal, lock) => {
      onAcquired(lock.fence);
      for (const [customer, cents] of INVOICES) {
        await sleep(INVOICE_GAP_MS); // three of them outlast the ttl: the session keeps the lease alive
        if (signal.aborted) throw signal.reason; // lost: stop working
        ledger.writeInvoice(lock.fence, night, customer);
        // Added to the total only if the lease is live on the server, in the
        // same atomic step as the check.
        await lock.guard("INCRBY", totalKey(night), cents);
      }
      console.log(`[${night}] worker ${id}: ran the billing job with fence ${lock.fence}`);
      return lock.fence;
    });
  } catch (err) {
    if (!(err instanceof NotAcquiredError)) throw err;
    console.log(`[${night}] worker ${id}: another worker is running it, skipping`);
    return null;
  }
}

// The auditor waits for the night's lock while the job holds it, in the
// server's queue; the job's release hands it the lock, with a larger fence.
// It then reads the total.
async function audit(client, locks, night, jobAcquired) {
  const jobFence = await jobAcquired;
  const started = performance.now();
  let lock;
  try {
    lock = await locks.acquire(lockKey(night), TTL_MS, { wait: WAIT_MS });
  } catch (err) {
    if (err instanceof NotAcquiredError) throw new Error(`[${night}] auditor: not handed the lock within ${WAIT_MS} ms`);
    throw err;
  }
  check(lock.fence > jobFence, `[${night}] auditor: fence ${lock.fence} is not above the job's ${jobFence}`);
  const total = Number(await client.get(totalKey(night)));
  await lock.release();
  const waited = Math.round(performance.now() - started);
  console.log(`[${night}] auditor: handed the lock on release after waiting ${waited} ms, fence ${lock.fence}, total ${total}`);
}

// All workers try at the same moment, as cron would start them; once one
// holds the lock, the auditor queues. The fence of the one that ran the job.
async function runNight(client, locks, ledger, night) {
  let onAcquired, noneAcquired;
  const jobAcquired = new Promise((resolve, reject) => [onAcquired, noneAcquired] = [resolve, reject]);
  const allWorkers = Promise.all(Array.from({ length: WORKERS }, (_, id) => worker(id, locks, night, ledger, onAcquired)));
  // Too late to matter once a worker got the lock.
  allWorkers.then(() => noneAcquired(new Error(`[${night}] no worker got the lock`)), () => {});
  const [fences] = await Promise.all([allWorkers, audit(client, locks, night, jobAcquired)]);
  const ran = fences.filter((fence) => fence !== null);
  check(ran.length === 1, `[${night}] exactly one worker runs the job, not ${ran.length}`);
  return ran[0];
}

// A rerun of the night gets the lock with a short lease kept alive by
// nothing (watchdog: false: no session, no watchdog), and stalls (a GC
// pause, a stopped VM) past it. When it wakes up, its guarded write to the
// total is refused by the server: nothing is written.
async function staleHolder(locks, night) {
  const stale = await locks.acquire(lockKey(night), TTL_MS, { watchdog: false });
  await sleep(TTL_MS + 200);
  try {
    await stale.guard("INCRBY", totalKey(night), 999999);
    throw new Error("a stale holder's guarded write must be refused");
  } catch (err) {
    if (!(err instanceof LostError)) throw err;
    console.log(`stale guarded write to ${totalKey(night)}: refused, LOST (${err.message})`);
  }
  check(!(await stale.release()), "the stale lease was gone");
}

async function main() {
  const client = await connect();
  try {
    // node-redis pipelines one client's commands on one connection; the
    // package opens a connection of its own for each wait.
    const locks = new Locks(client);
    // Start from no totals, so that the example can run again on one server.
    await client.del(NIGHTS.map(totalKey));
    const ledger = new Ledger();
    const first = await runNight(client, locks, ledger, NIGHTS[0]);
    const second = await runNight(client, locks, ledger, NIGHTS[1]);
    check(second > first, `the later holder has the larger fence: ${first} then ${second}`);
    await staleHolder(locks, NIGHTS[1]);
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
