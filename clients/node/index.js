// redis-lock for Node: fenced locks with a watchdog, waits in the server's
// FIFO queue, read/write locks, semaphores and leader election, over
// node-redis 4. See docs/clients/node.md.
"use strict";

const { Locks } = require("./lib/locks");
const { Lock } = require("./lib/lock");
const { Semaphore } = require("./lib/semaphore");
const { Election } = require("./lib/election");
const { keySlot } = require("./lib/slot");
const errors = require("./lib/errors");

module.exports = {
  Locks,
  Lock,
  Semaphore,
  Election,
  keySlot,
  LockError: errors.LockError,
  NotAcquiredError: errors.NotAcquiredError,
  LostError: errors.LostError,
  ServerError: errors.ServerError,
  LimitError: errors.LimitError,
  TimeoutError: errors.TimeoutError,
};
