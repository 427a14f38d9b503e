// Locks: acquires locks, readers and permits through a driver (a node-redis
// 4 client or cluster), and the helpers every hold uses to talk to the server.
"use strict";

const { NotAcquiredError, LostError, TimeoutError, isErrorReply, fromReply } = require("./errors");
const { driverFor } = require("./driver");
const { Lock } = require("./lock");
const { now, Request, withTimeout, fenceOf, fieldsOf, WAIT_READ_SLACK_MS, checkKey } = require("./common");

class Locks {
  /**
   * @param client a node-redis 4 client (createClient) or cluster
   *   (createCluster), connected; or a driver ({ send, dedicated }).
   * @param options.safetyMargin the fraction of the ttl (0 to 0.5, default
   *   0.1) by which a lock is declared lost before the client's deadline.
   * @param options.commandTimeout ms to wait for the reply of a command the
   *   package sends on the shared client (default 5000): node-redis 4 has no
   *   read timeout of its own.
   */
  constructor(client, { safetyMargin = 0.1, commandTimeout = 5000 } = {}) {
    this.driver = driverFor(client);
    if (typeof safetyMargin !== "number" || !(safetyMargin >= 0 && safetyMargin < 0.5)) {
      throw new RangeError(`safetyMargin must be in [0, 0.5), not ${safetyMargin}`);
    }
    if (typeof commandTimeout !== "number" || !(commandTimeout > 0)) {
      throw new RangeError(`commandTimeout must be a positive number of ms, not ${commandTimeout}`);
    }
    this.safetyMargin = safetyMargin;
    this.commandTimeout = commandTimeout;
  }

  /**
   * The lock on `key` for `ttl` ms, kept alive by a watchdog (LOCK.EXTEND
   * every ttl/3) until release(). Throws NotAcquiredError when another token
   * holds it (or others wait for it); with `wait` (ms), it queues in the
   * server's FIFO queue on a connection of its own, and throws
   * NotAcquiredError when the wait runs out; aborting `signal` leaves the
   * queue and throws the signal's reason.
   */
  async acquire(key, ttl, { wait, signal, owner, shared = false, watchdog = true } = {}) {
    const request = new Request({ kind: shared ? "shared" : "exclusive", key, ttl, wait, owner, watchdog });
    return this._acquire(request, signal);
  }

  /**
   * acquire(), then routine(signal, lock), then release(). The signal is
   * aborted (with a LostError) when the lock is lost: stop the work then.
   * Resolves to the routine's result; rejects with its error, else with a
   * LostError when the lock was lost before it ended, else NotAcquiredError.
   * using(key, ttl, routine) or using(key, ttl, options, routine).
   */
  async using(key, ttl, optionsOrRoutine, maybeRoutine) {
    const [options, routine] = typeof optionsOrRoutine === "function" ? [{}, optionsOrRoutine] : [optionsOrRoutine || {}, maybeRoutine];
    if (typeof routine !== "function") throw new TypeError("using needs a routine: using(key, ttl, async (signal) => ...)");
    return holding(await this.acquire(key, ttl, options), routine);
  }

  /** LOCK.INFO: null when free, else { fence, ttl, deadline, granted, extends, waiters, holders, mode, owner }. */
  async info(key) {
    checkKey(key);
    const fields = fieldsOf(await this._send(key, ["LOCK.INFO", key], "LOCK.INFO"));
    if (fields === null) return null;
    const info = {};
    for (const [name, value] of Object.entries(fields)) {
      info[name] = name === "owner" || name === "mode" ? String(value) : Number(value);
    }
    return info;
  }

  /** The semaphore `key` with `limit` permits (SEM.*). */
  semaphore(key, limit) {
    const { Semaphore } = require("./semaphore");
    return new Semaphore(this, key, limit);
  }

  /** Leader election on the lock `key`, the leader's lease `ttl` ms. */
  election(key, ttl, options = {}) {
    const { Election } = require("./election");
    return new Election(this, key, ttl, options);
  }

  // One command on the shared client, bounded by timeoutMs; error replies
  // as ServerError (LimitError for LIMIT).
  async _send(key, args, what, timeoutMs = this.commandTimeout) {
    try {
      return await withTimeout(this.driver.send(key, args), timeoutMs, what);
    } catch (err) {
      throw fromReply(err);
    }
  }

  async _acquire(request, signal) {
    if (signal && signal.aborted) throw signal.reason;
    if (request.waitMs !== undefined) return this._acquireWaiting(request, signal);
    const sent = now();
    let reply;
    try {
      reply = await this._send(request.key, request.args, request.args[0]);
    } catch (err) {
      if (!isErrorReply(err)) await this._releaseQuietly(request); // the reply may hide a grant
      throw err;
    }
    const fence = fenceOf(reply);
    if (fence === null) throw new NotAcquiredError(`${String(request.key)} is held by another token`);
    const lock = new Lock(this, request, fence, sent);
    lock._start();
    return lock;
  }

  // Waits in the server's queue on a connection of its own, whose read
  // timeout is longer than the wait; then pins the lease with one extend.
  async _acquireWaiting(request, signal) {
    const conn = await this.driver.dedicated(request.key);
    if (signal && signal.aborted) {
      await conn.close();
      throw signal.reason;
    }
    const sent = now();
    const reply = conn.send(request.args);
    reply.catch(() => {}); // rejected by the close when the wait is abandoned
    let onAbort;
    const aborted = new Promise((_, reject) => {
      onAbort = () => reject(signal.reason);
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
    });
    const readTimeout = request.waitMs === 0 ? 0 : request.waitMs + WAIT_READ_SLACK_MS;
    let got;
    try {
      got = await Promise.race([withTimeout(reply, readTimeout, "LOCK.ACQUIRE … WAIT"), aborted]);
    } catch (err) {
      await conn.close(); // leaves the server's queue
      if (!isErrorReply(err)) await this._releaseQuietly(request);
      throw fromReply(err);
    } finally {
      if (signal) signal.removeEventListener("abort", onAbort);
    }
    await conn.close();
    const fence = fenceOf(got);
    if (fence === null) {
      throw new NotAcquiredError(`${String(request.key)} was still held when the wait of ${request.waitMs} ms ran out`);
    }
    const lock = new Lock(this, request, fence, sent);
    await lock._pin();
    lock._start();
    return lock;
  }

  // Gives back what the request's token may hold; else it ends at its ttl.
  async _releaseQuietly(request) {
    try {
      await this._send(request.key, [request.releaseCommand, request.key, request.token], request.releaseCommand);
    } catch {
      // the lease ends at its ttl
    }
  }
}

// A lock held for a routine: released after it; see Locks.using.
async function holding(lock, routine) {
  let result;
  let failure = null;
  try {
    result = await routine(lock.signal, lock);
  } catch (err) {
    failure = { err };
  }
  let released = false;
  try {
    released = await lock.release();
  } catch (err) {
    if (!failure) throw err;
  }
  if (failure) throw failure.err;
  if (lock.lost) throw lock.lostError;
  if (!released) throw new LostError("refused"); // gone before the release: the work may not have been protected
  return result;
}

module.exports = { Locks, holding, TimeoutError };
