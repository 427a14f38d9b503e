// Leader election on one lock key: whoever holds it leads
// (docs/leader-election.md). Candidates wait in the server's queue; followers
// follow each change with LOCK.OBSERVE, with no polling.
"use strict";

const { NotAcquiredError } = require("./errors");
const { Request, checkKey, checkMs, checkOwner, fieldsOf, withTimeout, WAIT_READ_SLACK_MS, OBSERVE_TIMEOUT_MS } = require("./common");
const { fromReply } = require("./errors");

class Election {
  constructor(locks, key, ttl, { owner, observeTimeout = OBSERVE_TIMEOUT_MS } = {}) {
    this._locks = locks;
    this.key = checkKey(key);
    this.ttl = checkMs("ttl", ttl, 1);
    this.owner = checkOwner(owner);
    this.observeTimeout = checkMs("observeTimeout", observeTimeout, 1);
  }

  /**
   * Waits in the queue (WAIT 0: no limit, or up to `timeout` ms) on a
   * connection of its own, and returns the leader's Lock: its signal is
   * aborted when deposed; release() resigns. NotAcquiredError when `timeout`
   * runs out; aborting `signal` leaves the queue and throws its reason.
   */
  async campaign({ timeout, signal, watchdog = true } = {}) {
    const request = new Request({ kind: "exclusive", key: this.key, ttl: this.ttl, wait: timeout, campaign: true, owner: this.owner, watchdog });
    try {
      return await this._locks._acquire(request, signal);
    } catch (err) {
      if (err instanceof NotAcquiredError) throw new NotAcquiredError(`not elected within ${timeout} ms`);
      throw err;
    }
  }

  /** The leader now (LOCK.INFO): { fence, owner, ttl } or null. */
  async leader() {
    return leaderOf(await this._locks._send(this.key, ["LOCK.INFO", this.key], "LOCK.INFO"));
  }

  /**
   * The leader now, then each change of leader as it happens (null: nobody
   * leads), as an async iterator, on a connection of its own that closes
   * when the loop ends. A connection error ends it with that error: call
   * observe() again to carry on. Aborting `signal` ends it quietly.
   */
  async *observe({ signal } = {}) {
    if (signal && signal.aborted) return;
    const conn = await this._locks.driver.dedicated(this.key);
    const onAbort = () => conn.close();
    if (signal) signal.addEventListener("abort", onAbort, { once: true });
    try {
      let leader = leaderOf(await send(conn, ["LOCK.INFO", this.key], WAIT_READ_SLACK_MS));
      yield leader;
      for (;;) {
        const args = ["LOCK.OBSERVE", this.key, String(fenceSeen(leader)), String(this.observeTimeout)];
        const changed = leaderOf(await send(conn, args, this.observeTimeout + WAIT_READ_SLACK_MS));
        if (fenceSeen(changed) === fenceSeen(leader)) {
          leader = changed; // the observe timed out: the same leader
          continue;
        }
        leader = changed;
        yield leader;
      }
    } catch (err) {
      if (signal && signal.aborted) return;
      throw err;
    } finally {
      if (signal) signal.removeEventListener("abort", onAbort);
      await conn.close();
    }
  }
}

async function send(conn, args, timeoutMs) {
  try {
    return await withTimeout(conn.send(args), timeoutMs, args[0]);
  } catch (err) {
    throw fromReply(err);
  }
}

const fenceSeen = (leader) => (leader === null ? 0 : leader.fence);

// The holder in a LOCK.OBSERVE or LOCK.INFO reply, or null when free.
function leaderOf(reply) {
  const fields = fieldsOf(reply);
  if (fields === null) return null;
  const ttl = Number(fields.ttl);
  return {
    fence: Number(fields.fence),
    owner: fields.owner === undefined ? null : String(fields.owner),
    ttl: ttl < 0 ? null : ttl,
  };
}

module.exports = { Election };
