// Locks: acquires locks, readers and permits through a driver (a node-redis
// 4 client or cluster), and the helpers every hold uses to talk to the server.
"use strict";

const {
  NotAcquiredError, LostError, TimeoutError, NotReplicatedError, ModuleVersionError, isErrorReply, fromReply, isNoLease,
} = require("./errors");
const { driverFor } = require("./driver");
const { Lock } = require("./lock");
const { Sessions } = require("./session");
const { now, Request, withTimeout, fenceOf, fieldsOf, WAIT_READ_SLACK_MS, MAX_REASON_BYTES, checkKey } = require("./common");

const KEEPALIVE_MODES = ["auto", "session", "watchdog"];

// The oldest lock module this package drives, as MODULE LIST reports it
// (major*10000 + minor*100 + patch): 0.4.0, which has SYNC,
// LOCK.MACQUIRE and reports its version (builds before report 1).
const MIN_MODULE_VERSION = 400;

class Locks {
  /**
   * @param client a node-redis 4 client (createClient) or cluster
   *   (createCluster), connected; or a driver ({ send, dedicated }).
   * @param options.safetyMargin the fraction of the ttl (0 to 0.5, default
   *   0.1) by which a lock is declared lost before the client's deadline.
   * @param options.commandTimeout ms to wait for the reply of a command the
   *   package sends on the shared client (default 5000): node-redis 4 has no
   *   read timeout of its own.
   * @param options.keepalive how holds are kept alive: "auto" (default: a
   *   session where the server has LOCK.LEASE, else a watchdog per lock),
   *   "session" (always; an acquire fails where the server has none) or
   *   "watchdog" (LOCK.EXTEND every ttl/3 for each lock).
   */
  constructor(client, { safetyMargin = 0.1, commandTimeout = 5000, keepalive = "auto" } = {}) {
    this.driver = driverFor(client);
    if (!KEEPALIVE_MODES.includes(keepalive)) {
      throw new RangeError(`keepalive must be "auto", "session" or "watchdog", not ${keepalive}`);
    }
    if (typeof safetyMargin !== "number" || !(safetyMargin >= 0 && safetyMargin < 0.5)) {
      throw new RangeError(`safetyMargin must be in [0, 0.5), not ${safetyMargin}`);
    }
    if (typeof commandTimeout !== "number" || !(commandTimeout > 0)) {
      throw new RangeError(`commandTimeout must be a positive number of ms, not ${commandTimeout}`);
    }
    this.safetyMargin = safetyMargin;
    this.commandTimeout = commandTimeout;
    this.keepalive = keepalive;
    this._sessions = new Sessions(this);
    this._moduleCheck = null; // MODULE LIST, once per Locks: the promise of the check in flight or passed
  }

  /**
   * The lock on `key` for `ttl` ms, kept alive until release(): attached to
   * this Locks' session for this ttl (and, in a cluster, the key's master),
   * whose one LOCK.LEASE KEEPALIVE every ttl/3 keeps all of its holds
   * alive; or, with keepalive "watchdog" or on a server without LOCK.LEASE,
   * by a watchdog of its own (LOCK.EXTEND every ttl/3). `watchdog: false`:
   * neither (the caller extends). Throws NotAcquiredError when another token
   * holds it (or others wait for it); with `wait` (ms), it queues in the
   * server's FIFO queue on a connection of its own, and throws
   * NotAcquiredError when the wait runs out; aborting `signal` leaves the
   * queue and throws the signal's reason.
   */
  async acquire(key, ttl, { wait, signal, owner, shared = false, watchdog = true, sync } = {}) {
    const request = new Request({ kind: shared ? "shared" : "exclusive", key, ttl, wait, owner, watchdog, sync });
    return this._acquire(request, signal);
  }

  /**
   * One lock over every key of `keys` at once, all or none
   * (LOCK.MACQUIRE): one token, one fence (above every fence any of the
   * keys had), one lease, kept alive as acquire()'s (its session's
   * keepalive, or its watchdog's LOCK.MEXTEND). Throws NotAcquiredError
   * when any key is busy: nothing is then held. The lock is lost as a
   * whole when any of its keys is (a DEL, an expiry, a revocation of one
   * key); release() gives every key back (LOCK.MRELEASE). Options as
   * acquire()'s (`wait` queues on every key at once, holding none while it
   * waits; `shared` takes a read lease on every key; `sync`). guard() is
   * refused: LOCK.GUARD checks one key. In a cluster the keys must share a
   * hash slot ({tag}).
   */
  async acquireMany(keys, ttl, { wait, signal, owner, shared = false, watchdog = true, sync } = {}) {
    const request = new Request({ kind: shared ? "shared" : "exclusive", keys, ttl, wait, owner, watchdog, sync });
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
    await this._checkModule(key);
    const fields = fieldsOf(await this._send(key, ["LOCK.INFO", key], "LOCK.INFO"));
    if (fields === null) return null;
    const info = {};
    for (const [name, value] of Object.entries(fields)) {
      info[name] = name === "owner" || name === "mode" ? String(value) : Number(value);
    }
    return info;
  }

  /**
   * Takes the lock on `key` back from whoever holds it (LOCK.REVOKE key
   * [REASON reason]): every current hold of `key` ends as a release would
   * end it, waiters are served at once; resolves to the number of holds
   * ended (0 when free). Each holder learns it: its extends and guarded
   * commands get REVOKED <reason> (with this package, its signal is aborted
   * with a RevokedError whose revokedReason is `reason`). `reason`: 1 to
   * 128 bytes, or undefined for the server's "revoked by an operator". An
   * operator's call: the server puts LOCK.REVOKE in @dangerous and @admin.
   */
  async revoke(key, reason) {
    checkKey(key);
    await this._checkModule(key);
    const args = ["LOCK.REVOKE", key];
    if (reason !== undefined && reason !== null) {
      if (!(typeof reason === "string" || Buffer.isBuffer(reason))) throw new TypeError("reason must be a string or Buffer");
      const size = Buffer.byteLength(reason);
      if (size < 1 || size > MAX_REASON_BYTES) throw new RangeError(`reason must be 1 to ${MAX_REASON_BYTES} bytes, not ${size}`);
      args.push("REASON", reason);
    }
    return Number(await this._send(key, args, "LOCK.REVOKE"));
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

  // Refuses, with a ModuleVersionError, a server whose lock module is
  // missing or older than MIN_MODULE_VERSION (MODULE LIST, sent to the node
  // of `key`: a cluster's nodes are taken to run one build). Once it
  // passed nothing is sent again; a failed check is asked again next time.
  // An ACL user refused MODULE LIST (NOPERM) cannot tell: the check is
  // skipped rather than locking such a user out.
  async _checkModule(key) {
    if (!this._moduleCheck) {
      this._moduleCheck = this._askModule(key);
      this._moduleCheck.catch(() => {
        this._moduleCheck = null;
      });
    }
    return this._moduleCheck;
  }

  async _askModule(key) {
    let reply;
    try {
      reply = await this._send(key, ["MODULE", "LIST"], "MODULE LIST");
    } catch (err) {
      if (isErrorReply(err) && err.message.startsWith("NOPERM")) return;
      throw err;
    }
    const found = lockModuleVersion(reply);
    if (found < MIN_MODULE_VERSION) throw new ModuleVersionError(found, MIN_MODULE_VERSION);
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

  // The node that serves `key` ("" without a driver that knows nodes).
  async _nodeOf(key) {
    return this.driver.node ? String(await this.driver.node(key)) : "";
  }

  // A command with no key (LOCK.LEASE) on `node`, bounded by timeoutMs.
  async _sendTo(node, args, what, timeoutMs = this.commandTimeout) {
    try {
      const sent = this.driver.sendTo ? this.driver.sendTo(node, args) : this.driver.send(undefined, args);
      return await withTimeout(sent, timeoutMs, what);
    } catch (err) {
      throw fromReply(err);
    }
  }

  // The request with the lease of its session (or none): at once, or
  // waiting on a connection of its own. An acquire answered NOLEASE is sent
  // once more: with a new lease when the session's has ended, with the
  // lease of the key's node when the key is another node's than this client
  // thought, or with a watchdog of its own when the lease lives but the key
  // is served elsewhere (a slot being migrated); a wait then waits what is
  // left of it.
  async _acquire(request, signal) {
    if (signal && signal.aborted) throw signal.reason;
    await this._checkModule(request.key);
    const started = now();
    let own = false;
    for (let retried = false; ; retried = true) {
      const session = own ? null : await this._sessions.join(request);
      try {
        return await this._acquireWith(request, signal, session);
      } catch (err) {
        if (!session || retried || !isNoLease(err)) throw err;
      }
      own = await this._sessions.noLease(session, request.key);
      if (request.waitMs) {
        const left = request.waitMs - (now() - started);
        if (left < 1) throw new NotAcquiredError(`${String(request.key)} was still held when the wait ran out`);
        request.waitMs = Math.ceil(left);
      }
    }
  }

  async _acquireWith(request, signal, session) {
    try {
      const lease = session ? session.id : null;
      if (request.waitMs !== undefined) return await this._acquireWaiting(request, signal, session, lease);
      const sent = now();
      let reply;
      try {
        reply = await this._send(request.key, request.args(lease), "LOCK.ACQUIRE", this.commandTimeout + request.syncMs);
      } catch (err) {
        if (!isErrorReply(err) || confirmedMeanwhile(err)) await this._releaseQuietly(request); // the reply may hide a grant
        throw err;
      }
      const fence = fenceOf(reply);
      if (fence === null) throw new NotAcquiredError(`${String(request.key)} is held by another token`);
      return await this._held(request, fence, sent, session, false);
    } finally {
      if (session) session._leave();
    }
  }

  // The Lock of a grant: attached to its session, or kept alive by its own
  // watchdog (after an extend that pins the lease, when the grant came
  // after a WAIT).
  async _held(request, fence, sent, session, waited) {
    const lock = new Lock(this, request, fence, sent);
    if (session) {
      lock._session = session;
      const lost = session._attach(lock);
      if (lost) {
        await this._releaseQuietly(request); // the lease ended before the grant's reply came
        throw lost;
      }
      return lock;
    }
    if (waited) await lock._pin();
    lock._start();
    return lock;
  }

  // Waits in the server's queue on a connection of its own, whose read
  // timeout is longer than the wait. A lock of its own then pins its lease
  // with one extend; an attached one needs none (its session's keepalives
  // set its clock, and the session is kept alive while it waits).
  async _acquireWaiting(request, signal, session, lease) {
    const conn = await this.driver.dedicated(request.key);
    if (signal && signal.aborted) {
      await conn.close();
      throw signal.reason;
    }
    const sent = now();
    const reply = conn.send(request.args(lease));
    reply.catch(() => {}); // rejected by the close when the wait is abandoned
    let onAbort;
    const aborted = new Promise((_, reject) => {
      onAbort = () => reject(signal.reason);
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
    });
    const readTimeout = request.waitMs === 0 ? 0 : request.waitMs + request.syncMs + WAIT_READ_SLACK_MS;
    let got;
    try {
      got = await Promise.race([withTimeout(reply, readTimeout, "LOCK.ACQUIRE … WAIT"), aborted]);
    } catch (err) {
      await conn.close(); // leaves the server's queue
      if (!isErrorReply(err) || confirmedMeanwhile(err)) await this._releaseQuietly(request);
      throw fromReply(err);
    } finally {
      if (signal) signal.removeEventListener("abort", onAbort);
    }
    await conn.close();
    const fence = fenceOf(got);
    if (fence === null) {
      throw new NotAcquiredError(`${String(request.key)} was still held when the wait of ${request.waitMs} ms ran out`);
    }
    return this._held(request, fence, sent, session, true);
  }

  // Gives back what the request's token may hold; else it ends at its ttl.
  async _releaseQuietly(request) {
    try {
      await this._send(request.key, request.releaseArgs(), request.releaseCommand);
    } catch {
      // the lease ends at its ttl
    }
  }
}

// A NOSYNC reply whose grant stands (confirmed to the token meanwhile): the
// caller is told it holds nothing, so it is given back.
function confirmedMeanwhile(err) {
  const reply = fromReply(err);
  return reply instanceof NotReplicatedError && !reply.undone;
}

// MODULE LIST's reply (an array of modules, each a name/value array or a
// map): the ver of the module named "lock", 0 when there is none.
function lockModuleVersion(reply) {
  if (!Array.isArray(reply)) throw new TypeError(`unexpected reply to MODULE LIST: ${typeof reply}`);
  for (const module of reply) {
    const fields = fieldsOf(module);
    if (fields && String(fields.name) === "lock") return Number(fields.ver);
  }
  return 0;
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
  if (lock.lost) {
    // The loss wins: the release is sent, not waited for, as the server may
    // be unreachable (a release then takes commandTimeout to fail).
    lock.release().catch(() => {});
    if (failure) throw failure.err;
    throw lock.lostError;
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

module.exports = { Locks, holding, TimeoutError, MIN_MODULE_VERSION, lockModuleVersion };
