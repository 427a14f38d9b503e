// A held lock: exclusive, shared (a reader), or a semaphore's permits, all
// one kind of hold under one lease path. Its clock counts the lease from the
// send of the last successful acquire or extend, on the monotonic clock.
"use strict";

const { LostError, LimitError, ServerError } = require("./errors");
const { now, checkMs, withTimeout } = require("./common");
const { startKeepalive } = require("./keepalive");

class Lock {
  constructor(locks, request, fence, sent) {
    this._locks = locks;
    this._request = request;
    this.key = request.key;
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
    this._extended(sent, request.ttlMs);
  }

  /** Aborted when the lock is lost; its reason is a LostError. */
  get signal() {
    return this._controller.signal;
  }

  /** Whether the lock has been lost. */
  get lost() {
    return this._lostError !== null;
  }

  /** The LostError once lost, else null. */
  get lostError() {
    return this._lostError;
  }

  /** The end of the lease on performance.now()'s clock, never after the server's deadline. */
  get validUntil() {
    return this._validUntil;
  }

  /** The ttl the next extend asks for, in ms. */
  get ttl() {
    return this._ttlMs;
  }

  /**
   * Sets the lease to end `ttl` ms from now (default: the current ttl);
   * later extends use it. Throws LostError (and the lock is lost) when the
   * token no longer holds the lock; LimitError when the server's hold limit
   * refuses (the lease then holds until its current deadline).
   */
  async extend(ttl = this._ttlMs) {
    const ttlMs = checkMs("ttl", ttl, 1);
    const sent = now();
    const renewed = await this._sendExtend(ttlMs, this._locks.commandTimeout);
    if (!renewed) {
      this._markLost("refused");
      throw new LostError("refused");
    }
    this._extended(sent, ttlMs);
    if (this._keepalive) this._keepalive.moved();
  }

  /**
   * Stops the keepalive and gives the lock back, handing it to the first
   * waiter: true released, false already gone (expired, deleted, taken,
   * released before). After a connection error it is safe to call again:
   * each call sends the release anew.
   */
  async release() {
    this._stop();
    const { releaseCommand, key, token } = this._request;
    const reply = await this._locks._send(key, [releaseCommand, key, token], releaseCommand);
    return reply === 1;
  }

  /**
   * Runs `command` only while this lock holds (LOCK.GUARD key token command
   * ...), in the same atomic step as the check, and returns its reply. When
   * the lock is not held nothing runs, the lock is marked lost, and a
   * LostError is thrown. A reader runs read-only commands only (a write gets
   * a ServerError, and the lock stays held). In a cluster the command's keys
   * must share the lock key's slot ({tag}).
   */
  async guard(...command) {
    if (this._request.kind === "permits") throw new TypeError("a semaphore's permits guard no command");
    if (command.length === 0) throw new TypeError("guard needs a command, as in guard('SET', 'key', 'value')");
    const args = ["LOCK.GUARD", this.key, this.token, ...command.map((a) => (Buffer.isBuffer(a) ? a : String(a)))];
    try {
      return await this._locks._send(this.key, args, "LOCK.GUARD");
    } catch (err) {
      if (err instanceof ServerError && err.code === "LOST") {
        this._markLost("refused");
        throw new LostError("refused"); // what the server said, whatever was noticed first
      }
      throw err;
    }
  }

  // One extend: true renewed, false refused.
  async _sendExtend(ttlMs, timeoutMs) {
    const { extendCommand, key, token } = this._request;
    const reply = await this._locks._send(key, [extendCommand, key, token, String(ttlMs)], extendCommand, timeoutMs);
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

  _markLost(reason) {
    if (this._lostError) return this._lostError;
    const lost = new LostError(reason);
    if (this._stopped) return lost; // released already: nothing to signal
    this._lostError = lost;
    this._stop();
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
