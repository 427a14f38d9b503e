// The package's errors. None carries a token.
"use strict";

class LockError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

// The lock (or the permits) could not be had: another token holds it, others
// wait for it, or the wait ran out.
class NotAcquiredError extends LockError {}

// The lock was lost while it was held. `reason`: "refused" (the server said
// the token no longer holds it: an extend answered 0, a guarded command got
// LOST), "expired" (its deadline less the margin came with no successful
// extend: the server is down, paused or unreachable) or "limit" (the server's
// hold limit refused to extend it, and its deadline came).
class LostError extends LockError {
  constructor(reason) {
    super(LOST_MESSAGES[reason] || LOST_MESSAGES.expired);
    this.reason = reason;
  }
}

const LOST_MESSAGES = {
  refused: "lock lost: the token no longer holds it (released, expired, deleted or taken)",
  expired: "lock lost: its lease ended with no successful extend (server down or unreachable?)",
  limit: "lock lost: the server's hold limit refused to extend it, and its lease ended",
};

// An error reply of the server: `code` is its first word ("ERR", "WRONGTYPE",
// "NOPERM", "CROSSSLOT" ...), `message` the whole text.
class ServerError extends LockError {
  constructor(message, options) {
    super(message, options);
    this.code = message.split(" ", 1)[0];
  }
}

// A LIMIT reply (lock.max-hold-ms, lock.max-extends, lock.max-waiters,
// lock.max-holders). After a refused extend the lease still holds until its
// current deadline.
class LimitError extends ServerError {}

// No reply within the package's time for a command: it may or may not have
// run.
class TimeoutError extends LockError {}

// node-redis 4 gives an error reply as an ErrorReply (its message is the
// reply's text); any other error is the connection's.
function isErrorReply(err) {
  return err instanceof ServerError || (err instanceof Error && err.constructor.name === "ErrorReply");
}

// The package's error for an error reply; other errors stay as they are.
function fromReply(err) {
  if (err instanceof ServerError || !isErrorReply(err)) return err;
  return err.message.startsWith("LIMIT ")
    ? new LimitError(err.message, { cause: err })
    : new ServerError(err.message, { cause: err });
}

module.exports = { LockError, NotAcquiredError, LostError, ServerError, LimitError, TimeoutError, isErrorReply, fromReply };
