// Sessions, after etcd's concurrency.Session: one server lease (LOCK.LEASE
// GRANT) per node and per ttl, granted when the first hold needs it, kept
// alive by one timer (LOCK.LEASE KEEPALIVE every ttl/3) for every hold
// attached to it (LEASE id on the acquire). No hold of a session is
// extended on its own; each keeps its own signal, which the session fires.
//
// - A keepalive answered 1 moves the session's clock (from its send), and
//   with it every hold's. Then LOCK.LEASE INFO's count of holds is compared
//   with this client's: fewer on the server means a hold ended one by one
//   (DEL, an overwrite, LOCK.REVOKE key), and each hold is asked
//   (LOCK.EXTEND, which moves nothing for an attached hold): one the server
//   no longer has is lost, "refused", or a RevokedError with the reason.
// - A keepalive answered 0, or an acquire answered NOLEASE: the lease is
//   gone on the server (revoked, run out, or the server lost it). Each hold
//   is asked why, and all of them are lost together (RevokedError "lease
//   revoked" after LOCK.LEASE REVOKE, else "refused"). The next hold gets a
//   new lease; an acquire answered NOLEASE is sent once more, with it.
// - No successful keepalive before the lease's deadline less the safety
//   margin (server down, paused, unreachable): every hold is lost at once
//   ("expired").
//
// A hold whose release got no answer (a connection error) stays on the
// server, attached to the lease: the session sends its release again with
// each keepalive until one is answered, so that the lease does not keep it
// alive for the session's life.
//
// A session nobody uses (no hold, no acquire in flight) is not kept alive:
// a hold taken before its deadline less the margin attaches to it (and a
// keepalive is sent at once if one is due), a later one grants a new lease.
// Its timers are unref'd: a forgotten lock does not keep the process alive.
"use strict";

const { LostError, lacksLeases, isErrorReply } = require("./errors");
const { now } = require("./common");

// A Client's sessions: which lease a new hold attaches to.
class Sessions {
  constructor(locks) {
    this._locks = locks;
    this._support = "unknown"; // whether the server has LOCK.LEASE for this user
    this._current = new Map(); // `${node}\n${ttl}` -> Session
    this._granting = Promise.resolve(); // one grant at a time: holds asked for at once share one lease
  }

  // The live session a hold of `request` attaches to, granted now if there
  // is none, with the acquire counted as in flight (call _leave after it);
  // null when the hold keeps its own watchdog (or none).
  async join(request) {
    const mode = this._locks.keepalive;
    // A keepalive carries no SYNC: a lock taken with `sync` keeps its own
    // watchdog, whose extends do.
    if (!request.watchdog || mode === "watchdog" || request.sync) return null;
    if (mode === "auto" && this._support === "no") return null;
    const node = await this._locks._nodeOf(request.key);
    const which = `${node}\n${request.ttlMs}`;
    const done = await this._turn();
    try {
      const current = this._current.get(which);
      if (current && current._enter()) return current;
      const sent = now();
      let id;
      try {
        id = await this._locks._sendTo(node, ["LOCK.LEASE", "GRANT", String(request.ttlMs)], "LOCK.LEASE GRANT");
      } catch (err) {
        if (mode === "auto" && lacksLeases(err)) {
          this._support = "no";
          return null;
        }
        throw err;
      }
      const session = new Session(this._locks, String(id), node, request.ttlMs, sent);
      this._support = "yes";
      for (const [key, old] of this._current) if (old.ended) this._current.delete(key);
      this._current.set(which, session);
      return session;
    } finally {
      done();
    }
  }

  // Waits for the previous grant; resolves to the function that ends this one.
  _turn() {
    let done;
    const mine = new Promise((resolve) => (done = resolve));
    const previous = this._granting;
    this._granting = previous.then(() => mine);
    return previous.then(() => done);
  }

  // An acquire with `session`'s lease was answered NOLEASE. The key may be
  // another node's than this client thought (then the session is left
  // alone). Else a keepalive asks the session's node: 0, the lease is gone,
  // and so is every hold attached to it; 1, the lease lives and the key was
  // served by another node (ASK, during a slot's migration): true, the hold
  // is to keep a watchdog of its own.
  async noLease(session, key) {
    if ((await this._locks._nodeOf(key)) !== session.node) return false;
    const sent = now();
    let alive;
    try {
      alive = await this._locks._sendTo(session.node, ["LOCK.LEASE", "KEEPALIVE", session.id], "LOCK.LEASE KEEPALIVE");
    } catch {
      return false; // no answer: the retry tells
    }
    if (alive !== 1) {
      await session._endedByServer();
      return false;
    }
    session._renewed(sent);
    return true;
  }
}

// One server lease (LOCK.LEASE) that every hold of one ttl taken through a
// Locks (on one node, in a cluster) is attached to, kept alive with one
// LOCK.LEASE KEEPALIVE every ttl/3 whatever the number of holds. When it
// ends (revoked, run out on the server, or not kept alive in time), every
// hold attached to it is lost at once, each through its own signal, and the
// next hold gets a new Session. `lock.session` says which a lock is
// attached to.
class Session {
  constructor(locks, id, node, ttlMs, sent) {
    this._locks = locks;
    /** The lease's id: a secret like a token (whoever knows it keeps every hold alive, or revokes them all). Never log it. */
    this.id = id;
    /** The node it lives on ("" outside a cluster). */
    this.node = node;
    /** The lease's ttl in ms: its holds live until it is not kept alive for that long. */
    this.ttl = ttlMs;
    this._holds = new Set(); // attached and not lost or released
    this._orphans = new Set(); // released, but the release got no answer
    this._pending = 1; // acquires in flight with this lease: the one that granted it
    this._ending = false; // the server said the lease is gone: the holds are being asked why
    this._inflight = false; // a keepalive round is on its way
    this._controller = new AbortController();
    this._deadlineTimer = null;
    this._keepaliveTimer = null;
    this._validUntil = 0;
    this._renewedAt(sent);
    this._schedule();
  }

  /** How many holds are attached now. */
  get holds() {
    return this._holds.size;
  }

  /** The end of the lease on performance.now()'s clock: the grant's or last successful keepalive's send, plus the ttl. */
  get validUntil() {
    return this._validUntil;
  }

  /** Aborted once the session has ended, after every hold was told; its reason is a LostError ("expired", "refused") or a RevokedError. */
  get signal() {
    return this._controller.signal;
  }

  /** null while it lives; the LostError once it ended. */
  get ended() {
    return this._controller.signal.aborted ? this._controller.signal.reason : null;
  }

  get _lostAt() {
    return this._validUntil - this.ttl * this._locks.safetyMargin;
  }

  // Counts an acquire in flight, if the session lives and its term has not run out.
  _enter() {
    if (this.ended || this._ending || now() >= this._lostAt) return false;
    this._pending++;
    this._schedule();
    return true;
  }

  _leave() {
    this._pending--;
    this._schedule();
  }

  // Attaches a hold just granted with this lease; the loss when the session
  // ended (or is ending) before the reply came.
  _attach(lock) {
    if (this.ended) return this.ended;
    if (this._ending) return new LostError("refused");
    if (now() >= this._lostAt) return new LostError("expired");
    this._holds.add(lock);
    this._schedule();
    return null;
  }

  _detach(lock) {
    if (this._holds.delete(lock)) this._schedule();
  }

  // How a hold's release went: with no answer (not an error reply), the
  // session sends it again with its keepalives.
  _released(lock, err) {
    if (err && !isErrorReply(err) && !this.ended) this._orphans.add(lock);
    else this._orphans.delete(lock);
    this._schedule();
  }

  // How many holds the server should count: attached, and released with no answer.
  // A lock on several keys is a hold per key on the server.
  get _expected() {
    let n = 0;
    for (const lock of this._holds) n += lock._request.holds;
    for (const lock of this._orphans) n += lock._request.holds;
    return n;
  }

  _renewedAt(sent) {
    if (sent + this.ttl > this._validUntil) {
      this._validUntil = sent + this.ttl;
      this._nextKeepalive = sent + this.ttl / 3;
    }
  }

  // A keepalive sent at `sent` succeeded (outside a round, too).
  _renewed(sent) {
    if (this.ended || this._ending) return;
    this._renewedAt(sent);
    this._schedule();
  }

  // The keeper's timers: the deadline less the margin, and the next
  // keepalive while the session has holds or acquires in flight.
  _schedule() {
    clearTimeout(this._deadlineTimer);
    clearTimeout(this._keepaliveTimer);
    if (this.ended) return;
    this._deadlineTimer = setTimeout(() => this._expireIfDue(), Math.max(0, this._lostAt - now()));
    this._deadlineTimer.unref();
    if (!this._ending && !this._inflight && this._expected + this._pending > 0) {
      this._keepaliveTimer = setTimeout(() => this._round(), Math.max(0, this._nextKeepalive - now()));
      this._keepaliveTimer.unref();
    }
  }

  // One keepalive, bounded by the deadline less the margin, then the count
  // of holds on the server against this client's. A failure is tried again
  // after a pause, until the deadline.
  async _round() {
    if (this.ended || this._ending || this._inflight) return;
    this._inflight = true;
    const before = this._expected;
    const sent = now();
    try {
      const alive = await this._locks._sendTo(this.node, ["LOCK.LEASE", "KEEPALIVE", this.id], "LOCK.LEASE KEEPALIVE", Math.max(1, this._lostAt - sent));
      if (alive === 1) {
        this._renewedAt(sent);
        await this._releaseOrphans(Math.max(1, this._lostAt - now()));
        await this._check(before);
      } else {
        await this._endedByServer();
      }
    } catch {
      // Try again until the deadline: a reconnect in between costs nothing.
      this._nextKeepalive = now() + Math.min(this.ttl / 20, 500);
    } finally {
      this._inflight = false;
      this._schedule();
    }
  }

  // Sends again each release that got no answer.
  async _releaseOrphans(timeout) {
    await Promise.all([...this._orphans].map(async (lock) => {
      const { releaseCommand, key } = lock._request;
      try {
        await this._locks._send(key, lock._request.releaseArgs(), releaseCommand, timeout);
        this._released(lock, null);
      } catch (err) {
        this._released(lock, err);
      }
    }));
  }

  // Compares the server's count of the lease's holds with this client's
  // (the smaller of before and after the keepalive, so that a hold released
  // meanwhile is not taken for one taken away); fewer on the server: each
  // hold is asked.
  async _check(before) {
    const timeout = Math.max(1, this._lostAt - now());
    let info;
    try {
      info = await this._locks._sendTo(this.node, ["LOCK.LEASE", "INFO", this.id], "LOCK.LEASE INFO", timeout);
    } catch {
      return;
    }
    if (!Array.isArray(info)) return; // gone since the keepalive: the next one says so
    const at = info.findIndex((field, i) => i % 2 === 0 && String(field) === "holds");
    if (at < 0 || Number(info[at + 1]) >= Math.min(before, this._expected)) return;
    await Promise.all([...this._holds].map(async (lock) => {
      try {
        const lost = await lock._probe(timeout);
        if (lost) lock._markLost(lost);
      } catch {
        // no answer: the next round asks again
      }
    }));
  }

  // The server no longer has the lease (a keepalive answered 0, an acquire
  // NOLEASE). Every attached hold is lost, each with the reason its own
  // extend gives (REVOKED lease revoked after LOCK.LEASE REVOKE, or an
  // earlier LOCK.REVOKE's reason), else "refused"; all of them told
  // together once they have answered. Should the answers not come before
  // the deadline less the margin, the deadline ends them, as expired.
  async _endedByServer() {
    if (this.ended || this._ending) return;
    this._ending = true;
    this._schedule();
    const timeout = Math.max(1, this._lostAt - now());
    const reasons = new Map();
    let ended = new LostError("refused");
    await Promise.all([...this._holds].map(async (lock) => {
      let lost = null;
      try {
        lost = await lock._probe(timeout);
      } catch {
        // no answer: "refused", as the lease is gone
      }
      if (lost && lost.reason === "revoked") ended = lost;
      reasons.set(lock, lost && lost.reason === "revoked" ? lost : new LostError("refused"));
    }));
    this._end(ended, (lock) => reasons.get(lock) || new LostError("refused"));
  }

  _expireIfDue() {
    if (this.ended) return;
    if (now() < this._lostAt) return this._schedule(); // moved meanwhile
    this._end(new LostError("expired"), () => new LostError("expired"));
  }

  // Records why it ended (once), tells every hold, then aborts the signal.
  _end(why, reasonOf) {
    if (this.ended) return;
    const holds = [...this._holds];
    this._holds.clear();
    this._orphans.clear(); // the lease's end ends them on the server
    for (const lock of holds) lock._markLost(reasonOf(lock));
    this._controller.abort(why);
    this._schedule();
  }
}

module.exports = { Sessions, Session };
