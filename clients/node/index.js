// redis-lock for Node: fenced locks kept alive by one session lease per
// connection (one keepalive for all holds), waits in the server's FIFO
// queue, read/write locks, semaphores, leader election and revocation, over
// node-redis 4. See docs/clients/node.md.
//
// The exports are plain names in one object literal: that is what Node's
// reader of CommonJS exports (cjs-module-lexer) sees, so that an ES module
// importing this file by its path gets every name too (a `name: a.b`
// property would end what it sees). index.mjs is the package's ES entry.
"use strict";

const { Locks } = require("./lib/locks");
const { Lock } = require("./lib/lock");
const { Semaphore } = require("./lib/semaphore");
const { Election } = require("./lib/election");
const { Session } = require("./lib/session");
const { keySlot } = require("./lib/slot");
const {
  LockError, NotAcquiredError, LostError, RevokedError, ServerError, LimitError, TimeoutError,
  NotReplicatedError, ModuleVersionError,
} = require("./lib/errors");
const { MIN_MODULE_VERSION } = require("./lib/locks");

module.exports = {
  Locks,
  Lock,
  Semaphore,
  Election,
  Session,
  keySlot,
  LockError,
  NotAcquiredError,
  LostError,
  RevokedError,
  ServerError,
  LimitError,
  TimeoutError,
  NotReplicatedError,
  ModuleVersionError,
  MIN_MODULE_VERSION,
};
