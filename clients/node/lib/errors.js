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
// LOST, the lock key answered WRONGTYPE: overwritten with another type), "expired" (its deadline less the margin came with no successful
// extend or keepalive: the server is down, paused or unreachable), "limit"
// (the server's hold limit refused to extend it, and its deadline came) or
// "revoked" (a RevokedError: the server took it away).
class LostError extends LockError {
  constructor(reason, message = LOST_MESSAGES[reason] || LOST_MESSAGES.expired) {
    super(message);
    this.reason = reason;
  }
}

const LOST_MESSAGES = {
  refused: "lock lost: the token no longer holds it (released, expired, deleted, overwritten or taken)",
  expired: "lock lost: its lease ended with no successful extend or keepalive (server down or unreachable?)",
  limit: "lock lost: the server's hold limit refused to extend it, and its lease ended",
};

// The lock was taken away on the server: an operator's LOCK.REVOKE key
// (`revokedReason` is its REASON, or "revoked by an operator"), or its
// session's lease revoked (LOCK.LEASE REVOKE: "lease revoked"). A LostError
// with `reason` "revoked".
class RevokedError extends LostError {
  constructor(revokedReason) {
    super("revoked", `lock lost: revoked: ${revokedReason}`);
    this.revokedReason = revokedReason;
  }
}

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

// A NOSYNC reply to a request made with `sync`: `acked` of `wanted`
// replicas acknowledged it within the sync timeout. From an acquire nothing
// is held (`undone`: the server gave the grant back); from an extend, the
// extension stands on the master only (the lease's deadline is not moved
// and the lock is not lost). Not a NotAcquiredError: the lock was free.
class NotReplicatedError extends ServerError {
  constructor(message, options) {
    super(message, options);
    const counts = /^NOSYNC (\d+) of (\d+) replicas acknowledged; (.*)$/s.exec(message);
    this.acked = counts ? Number(counts[1]) : null;
    this.wanted = counts ? Number(counts[2]) : null;
    this.undone = counts ? counts[3].includes("undone") : false;
  }
}

// The server has no lock module, or one older than this package needs, as
// MODULE LIST reports it (`ver`: major*10000 + minor*100 + patch; builds
// before 0.4.0 report 1). `found` is 0 when there is none.
class ModuleVersionError extends LockError {
  constructor(found, needed) {
    super(found === 0
      ? `the server has no lock module (MODULE LIST); this client needs version ${versionText(needed)} or later`
      : `the server's lock module is version ${versionText(found)}, older than ${versionText(needed)} that this client needs`);
    this.found = found;
    this.needed = needed;
  }
}

function versionText(ver) {
  if (ver < 400) return `${ver} (before 0.4.0)`;
  return `${Math.floor(ver / 10000)}.${Math.floor(ver / 100) % 100}.${ver % 100} (${ver})`;
}

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
  if (err.message.startsWith("LIMIT ")) return new LimitError(err.message, { cause: err });
  if (err.message.startsWith("NOSYNC ")) return new NotReplicatedError(err.message, { cause: err });
  return new ServerError(err.message, { cause: err });
}

// The loss an error reply to a guarded command says: LOST (the token no
// longer holds the lock) or REVOKED <reason> (it was taken away), which only
// the lock's check answers; null for any other error, the command's own
// among them.
function guardRefusal(err) {
  if (!isErrorReply(err)) return null;
  if (err.message.startsWith("LOST ")) return new LostError("refused");
  if (err.message === "REVOKED" || err.message.startsWith("REVOKED ")) return new RevokedError(err.message.slice("REVOKED ".length));
  return null;
}

// A WRONGTYPE reply. From a command on the lock key alone, the key now
// holds another type; from a guarded command it may be that command's own
// (Lock.guard tells them apart).
const isWrongType = (err) => isErrorReply(err) && err.message.startsWith("WRONGTYPE ");

// The loss an error reply to a command on the lock key alone (an extend, a
// session's probe) says: LOST, REVOKED <reason>, or WRONGTYPE (the key was
// overwritten with another type, a SET, which ended every hold of it: a
// refusal as a DEL is); null for any other error.
function refusal(err) {
  return guardRefusal(err) || (isWrongType(err) ? new LostError("refused") : null);
}

// A NOLEASE reply: the lease an acquire named is gone from the server.
const isNoLease = (err) => isErrorReply(err) && err.message.startsWith("NOLEASE ");

// A LOCK.LEASE GRANT error that says the server (or this ACL user) has no
// LOCK.LEASE: a module without lease groups, or NOPERM.
const lacksLeases = (err) => isErrorReply(err) && (err.message.startsWith("NOPERM ") || err.message.startsWith("ERR unknown command"));

module.exports = {
  LockError, NotAcquiredError, LostError, RevokedError, ServerError, LimitError, NotReplicatedError, ModuleVersionError,
  TimeoutError, isErrorReply, fromReply, refusal, guardRefusal, isWrongType, isNoLease, lacksLeases,
};
