// A held lock: exclusive, shared (a reader), or a semaphore's permits, all
// one kind of hold under one lease path: attached to a session (session.js),
// whose keepalives set its clock, or kept alive by a watchdog of its own
// (keepalive.js), whose clock counts the lease from the send of the last
// successful acquire or extend, on the monotonic clock.
"use strict";

const { LostError, LimitError, refusal, guardRefusal, isWrongType } = require("./errors");
const { now, checkMs, withTimeout } = require("./common");
const { startKeepalive } = require("./keepalive");

class Lock {
  constructor(locks, request, fence, sent) {
    this._locks = locks;
    this._request = request;
    this.key = request.key;
    /** Every key of the lock: one, or acquireMany's in the order given. */
    this.keys = request.keys ? [...request.keys] : [request.key];
    /** The token: a secret (whoever has it can release the lock). Never log it. */
    this.token = request.token;
    /** Larger than every fence the server issued before: pass it with every write. */
    this.fence = fence;
    this.shared = request.kind === "shared";
    /** A semaphore's permits held; 0 for a lock. */
    this.count = request.kind === "permits" ? request.count : 0;
    this._controller = new AbortController();
    this._lostError = null;
    this._stopped = false; // released or lost: the keepalive ends
    this._limitReached = false;
    this._keepalive = null;
    this._session = null; // set before it is attached
    this._extended(sent, request.ttlMs);
  }

  /** Aborted when the lock is lost; its reason is a LostError (a RevokedError when taken away). */
  get signal() {
    return this._controller.signal;
  }

  /** The session that keeps it alive, or null when it has a watchdog of its own (or none). */
  get session() {
    return this._session;
  }

  /** Whether the lock has been lost. */
  get lost() {
    return this._lostError !== null;
  }

  /** The LostError once lost, else null. */
  get lostError() {
    return this._lostError;
  }

  /** The end of the lease on performance.now()'s clock (its session's, when attached), never after the server's deadline. */
  get validUntil() {
    return this._session ? this._session.validUntil : this._validUntil;
  }

  /** The ttl the next extend asks for, in ms. */
  get ttl() {
    return this._ttlMs;
  }

  /**
   * Sets the lease to end `ttl` ms from now (default: the current ttl);
   * later extends use it. Throws LostError (and the lock is lost) when the
   * token no longer holds the lock (a RevokedError when it was taken away);
   * LimitError when the server's hold limit refuses (the lease then holds
   * until its current deadline). A lock attached to a session lives as long
   * as the session's lease, which the session keeps alive: extend only
   * checks that it still holds (the same errors) and moves nothing; `ttl`
   * is not used.
   */
  async extend(ttl = this._ttlMs) {
    const ttlMs = checkMs("ttl", ttl, 1);
    if (this._session) {
      const lost = await this._probe(this._locks.commandTimeout);
      if (lost) throw this._markLost(lost);
      return;
    }
    const sent = now();
    let renewed;
    try {
      renewed = await this._sendExtend(ttlMs, this._locks.commandTimeout + this._request.syncMs);
    } catch (err) {
      const lost = refusal(err);
      if (lost) throw this._markLost(lost);
      throw err;
    }
    if (!renewed) throw this._markLost("refused");
    this._extended(sent, ttlMs);
    if (this._keepalive) this._keepalive.moved();
  }

  /**
   * Stops the keepalive and gives the lock back, handing it to the first
   * waiter (every key of acquireMany's, LOCK.MRELEASE): true released
   * (every key), false already gone (for several keys: not every key was
   * still held; those that were are given back) (expired, deleted, taken,
   * overwritten with another type, released before). After a connection error it is safe to call again:
   * each call sends the release anew (and for a lock attached to a session,
   * the session sends it again with its keepalives until it is answered).
   */
  async release() {
    this._stop();
    if (this._session) this._session._detach(this);
    const { releaseCommand, key } = this._request;
    let reply;
    try {
      reply = await this._locks._send(key, this._request.releaseArgs(), releaseCommand);
    } catch (err) {
      if (this._session) this._session._released(this, err); // with no answer, the session sends it again
      if (isWrongType(err)) return false; // the key was overwritten with another type: gone
      throw err;
    }
    if (this._session) this._session._released(this, null);
    return Number(reply) === this._request.holds;
  }

  /**
   * Runs `command` only while this lock holds (LOCK.GUARD key token command
   * ...), in the same atomic step as the check, and returns its reply. When
   * the lock is not held nothing runs, the lock is marked lost, and a
   * LostError is thrown (a RevokedError, with the reason, when it was taken
   * away; "refused" when the lock key was overwritten with another type,
   * told from the command's own WRONGTYPE by a LOCK.INFO of the lock key). A reader runs read-only commands only (a write gets
   * a ServerError, and the lock stays held). In a cluster the command's keys
   * must share the lock key's slot ({tag}).
   */
  async guard(...command) {
    if (this._request.kind === "permits") throw new TypeError("a semaphore's permits guard no command");
    if (this._request.keys) throw new TypeError("a lock on several keys guards no command: LOCK.GUARD checks one key");
    if (command.length === 0) throw new TypeError("guard needs a command, as in guard('SET', 'key', 'value')");
    const args = ["LOCK.GUARD", this.key, this.token, ...command.map((a) => (Buffer.isBuffer(a) ? a : String(a)))];
    try {
      return await this._locks._send(this.key, args, "LOCK.GUARD");
    } catch (err) {
      let lost = guardRefusal(err);
      if (!lost && isWrongType(err) && (await this._overwritten())) lost = new LostError("refused");
      if (lost) {
        this._markLost(lost);
        throw lost; // what the server said, whatever was noticed first
      }
      throw err;
    }
  }

  // Whether the lock key now holds another type (LOCK.INFO answers
  // WRONGTYPE), after a guarded command's WRONGTYPE, which is the lock
  // key's or the command's own: the same text comes for both. LOCK.INFO
  // reads the lock key alone and changes nothing.
  async _overwritten() {
    try {
      await this._locks._send(this.key, ["LOCK.INFO", this.key], "LOCK.INFO");
      return false;
    } catch (err) {
      return isWrongType(err);
    }
  }

  // Asks the server whether the token still holds the lock, with an extend
  // (which moves nothing for a hold attached to a lease): null when it
  // does, else the loss ("refused", or a RevokedError); throws when there
  // was no answer.
  async _probe(timeoutMs) {
    try {
      return (await this._sendExtend(this._request.ttlMs, timeoutMs)) ? null : new LostError("refused");
    } catch (err) {
      const lost = refusal(err);
      if (lost) return lost;
      throw err;
    }
  }

  // One extend: true renewed, false refused. With SYNC the answer may take
  // the sync timeout longer (never past the lease's end, for a watchdog's).
  async _sendExtend(ttlMs, timeoutMs) {
    const { extendCommand, key } = this._request;
    const reply = await this._locks._send(key, this._request.extendArgs(ttlMs), extendCommand, timeoutMs);
    return reply === 1;
  }

  _extended(sent, ttlMs) {
    this._ttlMs = ttlMs;
    this._validUntil = sent + ttlMs;
    this._nextExtend = sent + ttlMs / 3;
  }

  get _lostAt() {
    return this._validUntil - this._ttlMs * this._locks.safetyMargin;
  }

  // Records the loss (once: the first keeps its reason), detaches the lock
  // from its session and aborts its signal; returns the loss recorded.
  // `lost`: a LostError, or a reason for one.
  _markLost(lost) {
    if (this._lostError) return this._lostError;
    if (!(lost instanceof LostError)) lost = new LostError(lost);
    if (this._stopped) return lost; // released already: nothing to signal
    this._lostError = lost;
    this._stop();
    if (this._session) this._session._detach(this);
    this._controller.abort(lost);
    return lost;
  }

  _stop() {
    this._stopped = true;
    if (this._keepalive) this._keepalive.stop();
  }

  // After a WAIT grant, whose moment is unknown: one extend pins the lease
  // to a known send. On failure the lock is given back (or gone).
  async _pin() {
    try {
      await this.extend();
    } catch (err) {
      if (err instanceof LostError) throw err;
      if (err instanceof LimitError) {
        this._limitReached = true; // held until the server's deadline, at least sent + ttl
        return;
      }
      await this._locks._releaseQuietly(this._request);
      this._markLost("refused");
      throw err;
    }
  }

  _start() {
    this._keepalive = startKeepalive(this);
  }
}

module.exports = { Lock };
