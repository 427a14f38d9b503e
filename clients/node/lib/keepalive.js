// The watchdog: one per lock, for a lock that is not attached to a session
// (keepalive "watchdog", a server without LOCK.LEASE, or watchdog: false,
// where it only watches the deadline). It extends the lease every ttl/3 and
// marks the lock lost when the server refuses an extend (0, or REVOKED with
// the reason), or when the deadline less the safety margin comes with no
// successful extend. session.js keeps attached locks alive instead.
"use strict";

const { LimitError, refusal } = require("./errors");
const { now } = require("./common");

function startKeepalive(lock) {
  let deadlineTimer = null;
  let extendTimer = null;
  let extending = false;
  let stopped = false;

  const clear = () => {
    clearTimeout(deadlineTimer);
    clearTimeout(extendTimer);
  };

  const schedule = () => {
    if (stopped) return;
    clear();
    // Timers are unref'd: a forgotten lock does not keep the process alive.
    deadlineTimer = setTimeout(onDeadline, Math.max(0, lock._lostAt - now()));
    deadlineTimer.unref();
    if (lock._request.watchdog && !lock._limitReached && !extending) {
      extendTimer = setTimeout(renew, Math.max(0, lock._nextExtend - now()));
      extendTimer.unref();
    }
  };

  const onDeadline = () => {
    if (stopped) return;
    if (now() < lock._lostAt) return schedule(); // moved meanwhile
    lock._markLost(lock._limitReached ? "limit" : "expired");
  };

  const renew = async () => {
    if (stopped) return;
    extending = true;
    const ttlMs = lock._ttlMs;
    const sent = now();
    try {
      // Bounded by the time left: a hung extend cannot outlive the lease.
      const renewed = await lock._sendExtend(ttlMs, Math.max(1, lock._lostAt - sent));
      if (stopped) return; // released meanwhile
      if (!renewed) {
        lock._markLost("refused");
        return;
      }
      if (sent + ttlMs > lock._validUntil) lock._extended(sent, ttlMs);
    } catch (err) {
      const lost = refusal(err);
      if (lost) {
        lock._markLost(lost); // REVOKED: taken away
        return;
      }
      if (err instanceof LimitError) {
        lock._limitReached = true; // the deadline ends it
      } else {
        // Try again until the deadline: a reconnect in between costs nothing.
        lock._nextExtend = now() + Math.min(lock._ttlMs / 20, 500);
      }
    } finally {
      extending = false;
    }
    schedule();
  };

  schedule();
  return {
    moved: schedule,
    stop() {
      stopped = true;
      clear();
    },
  };
}

module.exports = { startKeepalive };
