// A counting semaphore: at most `limit` permits out at once (SEM.*).
"use strict";

const { NotAcquiredError } = require("./errors");
const { Request, checkKey, checkInteger, fieldsOf, MAX_SEMAPHORE_LIMIT } = require("./common");

class Semaphore {
  constructor(locks, key, limit) {
    this._locks = locks;
    this.key = checkKey(key);
    this.limit = checkInteger("limit", limit, 1, MAX_SEMAPHORE_LIMIT);
  }

  /**
   * `count` permits (default 1) under one token for `ttl` ms: a Lock with
   * the same watchdog (SEM.EXTEND), signal and release (SEM.RELEASE, which
   * hands them to the head of the queue). NotAcquiredError when fewer are
   * free or others wait (with `wait`: when the wait ran out); the queue is
   * fair across counts.
   */
  async acquire(ttl, { count = 1, wait, signal, owner, watchdog = true } = {}) {
    checkInteger("count", count, 1, this.limit);
    const request = new Request({ kind: "permits", key: this.key, ttl, wait, owner, watchdog, limit: this.limit, count });
    try {
      return await this._locks._acquire(request, signal);
    } catch (err) {
      if (err instanceof NotAcquiredError) {
        throw new NotAcquiredError(`${String(this.key)} had fewer than ${count} free permits${request.waitMs ? ` when the wait of ${request.waitMs} ms ran out` : ""}`);
      }
      throw err;
    }
  }

  /** acquire(), then routine(signal, permits), then release(): as Locks.using. */
  async using(ttl, optionsOrRoutine, maybeRoutine) {
    const { holding } = require("./locks");
    const [options, routine] = typeof optionsOrRoutine === "function" ? [{}, optionsOrRoutine] : [optionsOrRoutine || {}, maybeRoutine];
    if (typeof routine !== "function") throw new TypeError("using needs a routine");
    return holding(await this.acquire(ttl, options), routine);
  }

  /** SEM.INFO: null when nobody holds a permit, else { limit, used, holders, waiters, fence, ttl, deadline }. */
  async info() {
    const fields = fieldsOf(await this._locks._send(this.key, ["SEM.INFO", this.key], "SEM.INFO"));
    if (fields === null) return null;
    const info = {};
    for (const [name, value] of Object.entries(fields)) info[name] = Number(value);
    return info;
  }
}

module.exports = { Semaphore };
