// Arguments, replies and timing that every part of the package shares.
"use strict";

const { randomUUID } = require("crypto");
const { performance } = require("perf_hooks");
const { TimeoutError } = require("./errors");

// The server refuses a WAIT longer than this (docs/commands.md): 365 days.
const MAX_WAIT_MS = 31536000000;
const MAX_OWNER_BYTES = 128;
const MAX_REASON_BYTES = 128;
const MAX_SEMAPHORE_LIMIT = 1000000;
// The most replicas SYNC may wait for.
const MAX_SYNC_REPLICAS = 1000;
// A dedicated connection reads this much longer than the server's WAIT (or
// OBSERVE) timeout, so that the server's own answer always comes first.
const WAIT_READ_SLACK_MS = 5000;
const OBSERVE_TIMEOUT_MS = 30000;

const now = () => performance.now();

// A duration in ms: a finite number >= min, rounded up to whole ms.
function checkMs(name, value, min, max = Number.MAX_SAFE_INTEGER) {
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new TypeError(`${name} must be a number of milliseconds, not ${typeof value === "number" ? value : typeof value}`);
  }
  const ms = Math.ceil(value);
  if (ms < min || ms > max) throw new RangeError(`${name} must be ${min} to ${max} ms, not ${value}`);
  return ms;
}

function checkKey(key) {
  if (!(typeof key === "string" || Buffer.isBuffer(key)) || key.length === 0) {
    throw new TypeError("key must be a non-empty string or Buffer");
  }
  return key;
}

function checkOwner(owner) {
  if (owner === undefined || owner === null) return undefined;
  if (!(typeof owner === "string" || Buffer.isBuffer(owner))) throw new TypeError("owner must be a string or Buffer");
  const size = Buffer.byteLength(owner);
  if (size < 1 || size > MAX_OWNER_BYTES) throw new RangeError(`owner must be 1 to ${MAX_OWNER_BYTES} bytes, not ${size}`);
  return owner;
}

// A `sync` option: { replicas, timeout } (timeout in ms, shorter than the
// ttl), or undefined/null (and replicas 0) for no SYNC.
function checkSync(sync, ttlMs) {
  if (sync === undefined || sync === null) return null;
  if (typeof sync !== "object") throw new TypeError("sync must be { replicas, timeout }");
  const replicas = checkInteger("sync.replicas", sync.replicas, 0, MAX_SYNC_REPLICAS);
  if (replicas === 0) return null;
  const timeoutMs = checkMs("sync.timeout", sync.timeout, 1, MAX_WAIT_MS);
  if (timeoutMs >= ttlMs) throw new RangeError(`sync.timeout must be shorter than the ttl (${ttlMs} ms), not ${timeoutMs}`);
  return { replicas, timeoutMs };
}

// The keys of a lock on several keys: at least one, each once.
function checkKeys(keys) {
  if (!Array.isArray(keys) || keys.length === 0) throw new TypeError("keys must be a non-empty array");
  const seen = new Set();
  for (const key of keys) {
    checkKey(key);
    const text = Buffer.isBuffer(key) ? key.toString("latin1") : `s${key}`;
    const tag = Buffer.isBuffer(key) ? `b${text}` : text;
    if (seen.has(tag)) throw new RangeError(`key ${String(key)} is given more than once`);
    seen.add(tag);
  }
  return [...keys];
}

function checkInteger(name, value, min, max) {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer from ${min} to ${max}, not ${value}`);
  }
  return value;
}

// One checked acquire: its command and the client's token (a UUIDv4, always
// sent: if the reply is lost, the package can still release what it holds).
// kind: "exclusive", "shared" or "permits". waitMs: undefined (no WAIT), 0
// (no limit: a campaign, `campaign` true and no `wait`) or the wait. With
// `keys` (acquireMany) it is one hold over every key (LOCK.MACQUIRE), `key`
// the first of them. `sync`: SYNC numreplicas timeout-ms on the acquire and
// the extends.
class Request {
  constructor({ kind, key, keys, ttl, wait, campaign, owner, limit, count, watchdog, sync }) {
    this.kind = kind;
    this.keys = keys === undefined ? null : checkKeys(keys);
    this.key = this.keys ? this.keys[0] : checkKey(key);
    this.ttlMs = checkMs("ttl", ttl, 1);
    this.sync = checkSync(sync, this.ttlMs);
    const noWait = wait === undefined || wait === null;
    this.waitMs = noWait ? (campaign ? 0 : undefined) : checkMs("wait", wait, 1, MAX_WAIT_MS);
    this.owner = checkOwner(owner);
    this.limit = limit;
    this.count = count;
    this.watchdog = watchdog !== false;
    this.token = randomUUID();
  }

  // The acquire command, with LEASE `lease` unless it is null.
  args(lease = null) {
    let args;
    if (this.kind === "permits") {
      args = ["SEM.ACQUIRE", this.key, String(this.limit), String(this.ttlMs), "COUNT", String(this.count)];
    } else if (this.keys) {
      args = [...this._keyArgs("LOCK.MACQUIRE"), String(this.ttlMs)];
    } else {
      args = ["LOCK.ACQUIRE", this.key, String(this.ttlMs)];
    }
    args.push("TOKEN", this.token);
    if (this.kind === "shared") args.push("SHARED");
    if (this.waitMs !== undefined) args.push("WAIT", String(this.waitMs));
    if (this.owner !== undefined) args.push("OWNER", this.owner);
    args.push(...this._syncArgs());
    if (lease !== null) args.push("LEASE", lease);
    return args;
  }

  // How many holds the server counts for it: one per key.
  get holds() {
    return this.keys ? this.keys.length : 1;
  }

  // How much longer than a plain command its answer may take: the sync
  // timeout, during which the server waits for replicas.
  get syncMs() {
    return this.sync ? this.sync.timeoutMs : 0;
  }

  _keyArgs(command) {
    return [command, String(this.keys.length), ...this.keys];
  }

  _syncArgs() {
    return this.sync ? ["SYNC", String(this.sync.replicas), String(this.sync.timeoutMs)] : [];
  }

  // The extend of this hold for ttlMs, with its SYNC.
  extendArgs(ttlMs) {
    const args = this.keys
      ? [...this._keyArgs("LOCK.MEXTEND"), this.token, String(ttlMs)]
      : [this.extendCommand, this.key, this.token, String(ttlMs)];
    return [...args, ...this._syncArgs()];
  }

  // The release of every key of this hold.
  releaseArgs() {
    return this.keys ? [...this._keyArgs("LOCK.MRELEASE"), this.token] : [this.releaseCommand, this.key, this.token];
  }

  get extendCommand() {
    return this.kind === "permits" ? "SEM.EXTEND" : "LOCK.EXTEND";
  }

  get releaseCommand() {
    return this.kind === "permits" ? "SEM.RELEASE" : "LOCK.RELEASE";
  }
}

// Resolves as `promise`, or rejects with a TimeoutError after `ms`
// (undefined or 0: no limit). The command itself is not cancelled.
function withTimeout(promise, ms, what) {
  if (!ms) return promise;
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`no reply to ${what} within ${Math.round(ms)} ms: it may or may not have run`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// The fence of an ACQUIRE reply [token, fence], or null for a refusal.
function fenceOf(reply) {
  if (reply === null || reply === undefined) return null;
  if (Array.isArray(reply) && reply.length === 2) return Number(reply[1]);
  throw new TypeError(`unexpected reply to an acquire: ${typeof reply}`);
}

// A map reply (RESP3) or flat name/value array (RESP2) as an object; null
// for a null reply.
function fieldsOf(reply) {
  if (reply === null || reply === undefined) return null;
  if (Array.isArray(reply)) {
    const fields = {};
    for (let i = 0; i + 1 < reply.length; i += 2) fields[String(reply[i])] = reply[i + 1];
    return fields;
  }
  if (typeof reply === "object") return { ...reply };
  throw new TypeError(`unexpected reply: ${typeof reply}, not a map`);
}

module.exports = {
  MAX_WAIT_MS, MAX_SYNC_REPLICAS, MAX_OWNER_BYTES, MAX_REASON_BYTES, MAX_SEMAPHORE_LIMIT, WAIT_READ_SLACK_MS, OBSERVE_TIMEOUT_MS,
  now, checkMs, checkKey, checkOwner, checkInteger, Request, withTimeout, fenceOf, fieldsOf,
};
