// redis-lock for Node: fenced locks kept alive by one session lease per
// connection (one keepalive for all holds), waits in the server's FIFO
// queue, read/write locks, semaphores, leader election and revocation, over
// node-redis 4. See docs/clients/node.md.
"use strict";

const { Locks } = require("./lib/locks");
const { Lock } = require("./lib/lock");
const { Semaphore } = require("./lib/semaphore");
const { Election } = require("./lib/election");
const { Session } = require("./lib/session");
const { keySlot } = require("./lib/slot");
const errors = require("./lib/errors");

module.exports = {
  Locks,
  Lock,
  Semaphore,
  Election,
  Session,
  keySlot,
  LockError: errors.LockError,
  NotAcquiredError: errors.NotAcquiredError,
  LostError: errors.LostError,
  RevokedError: errors.RevokedError,
  ServerError: errors.ServerError,
  LimitError: errors.LimitError,
  TimeoutError: errors.TimeoutError,
};
