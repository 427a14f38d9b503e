// Types of redis-lock-client (hand-written; the package is plain CommonJS).

/** What the package needs of a client library: see lib/driver.js. */
export interface Driver {
  /** One command on the shared client, routed by `key` (undefined for LOCK.LEASE on a driver without sendTo); error replies reject. */
  send(key: string | Buffer | undefined, args: Array<string | Buffer>): Promise<unknown>;
  /** A connection of its own to the server that owns `key`, that never reconnects. */
  dedicated(key: string | Buffer): Promise<DedicatedConnection>;
  /** For a cluster: the id of the master that serves `key` now (one session lease per master). */
  node?(key: string | Buffer): string | Promise<string>;
  /** For a cluster: one command (LOCK.LEASE, which has no key) on the master `node` names. */
  sendTo?(node: string, args: Array<string | Buffer>): Promise<unknown>;
}

export interface DedicatedConnection {
  send(args: Array<string | Buffer>): Promise<unknown>;
  /** Closes it; a pending send rejects (a waiter leaves the server's queue). */
  close(): Promise<void>;
}

/**
 * A node-redis 4 client (createClient) or cluster (createCluster), connected,
 * described by the methods the package uses.
 */
export type RedisClientLike =
  | { sendCommand(args: Array<string | Buffer>): Promise<unknown>; duplicate(overrides?: object): unknown }
  | { sendCommand(firstKey: string | Buffer | undefined, isReadonly: boolean | undefined, args: Array<string | Buffer>): Promise<unknown>; getSlotMaster(slot: number): { client: unknown } };

export interface LocksOptions {
  /** Fraction of the ttl (0 to 0.5, default 0.1) by which a lock is declared lost before the client's deadline. */
  safetyMargin?: number;
  /** Ms to wait for the reply of a command on the shared client (default 5000). */
  commandTimeout?: number;
  /**
   * How holds are kept alive: "auto" (default: a session, one lease and one keepalive for all
   * holds, where the server has LOCK.LEASE, else a watchdog per lock), "session" or "watchdog".
   */
  keepalive?: KeepAliveMode;
}

export type KeepAliveMode = "auto" | "session" | "watchdog";

export interface AcquireOptions {
  /** Ms to wait in the server's FIFO queue (1 to 365 days), on a connection of its own. Without it, acquire does not block. */
  wait?: number;
  /** Aborting it leaves the queue; acquire then rejects with the signal's reason. */
  signal?: AbortSignal;
  /** A public label (1 to 128 bytes) that LOCK.INFO, LOCK.QUEUE and LOCK.OBSERVE show. */
  owner?: string | Buffer;
  /** A read lock: held beside other readers; its guard runs read-only commands only. */
  shared?: boolean;
  /** false: neither a session nor a watchdog keeps it alive (the signal still fires at the deadline less the margin). Default true. */
  watchdog?: boolean;
  /** SYNC: answered only once `replicas` (0 to 1000) replicas acknowledged the grant within `timeout` ms (shorter than the ttl); else NotReplicatedError and nothing is held. The lock's extends carry it too, and it keeps a watchdog of its own. */
  sync?: ReplicaSync | null;
}

export interface ReplicaSync {
  replicas: number;
  timeout: number;
}

export interface PermitOptions extends Omit<AcquireOptions, "shared"> {
  /** Permits to take under one token: 1 to the limit (default 1). */
  count?: number;
}

export type Routine<T> = (signal: AbortSignal, lock: Lock) => Promise<T> | T;

export interface LockInfo {
  fence: number;
  /** Ms left in the lease; -1 without a TTL. */
  ttl: number;
  /** Unix ms; -1 without a TTL. */
  deadline: number;
  granted: number;
  extends: number;
  waiters: number;
  holders?: number;
  mode?: string;
  owner?: string;
  /** The public number of the lease the hold is attached to (a Session's). */
  lease?: number;
}

export interface SemaphoreInfo {
  limit: number;
  used: number;
  holders: number;
  waiters: number;
  fence: number;
  ttl: number;
  deadline: number;
}

export interface Leader {
  /** Larger than every earlier leader's: pass it with every leader-only write. */
  fence: number;
  owner: string | null;
  /** Ms left in its lease when the server answered; null without a TTL. */
  ttl: number | null;
}

export class Locks {
  constructor(client: RedisClientLike | Driver, options?: LocksOptions);
  readonly driver: Driver;
  readonly safetyMargin: number;
  readonly commandTimeout: number;
  readonly keepalive: KeepAliveMode;
  /** The lock, kept alive until release(). Rejects with NotAcquiredError when held (or the wait ran out). */
  acquire(key: string | Buffer, ttl: number, options?: AcquireOptions): Promise<Lock>;
  /** acquire, run the routine with a signal aborted on loss, release. */
  /** One lock over every key at once, all or none (LOCK.MACQUIRE): one token, one fence; lost when any key is; released together. */
  acquireMany(keys: Array<string | Buffer>, ttl: number, options?: AcquireOptions): Promise<Lock>;
  using<T>(key: string | Buffer, ttl: number, routine: Routine<T>): Promise<T>;
  using<T>(key: string | Buffer, ttl: number, options: AcquireOptions, routine: Routine<T>): Promise<T>;
  /** LOCK.INFO; null when free. */
  info(key: string | Buffer): Promise<LockInfo | null>;
  /** LOCK.REVOKE: takes the lock back from its holders (each gets a RevokedError with `reason`); the number of holds ended. */
  revoke(key: string | Buffer, reason?: string | Buffer): Promise<number>;
  semaphore(key: string | Buffer, limit: number): Semaphore;
  election(key: string | Buffer, ttl: number, options?: ElectionOptions): Election;
}

export class Lock {
  readonly key: string | Buffer;
  /** Every key: one, or acquireMany's in the order given. */
  readonly keys: Array<string | Buffer>;
  /** A secret: whoever has it can release the lock. Never log it. */
  readonly token: string;
  readonly fence: number;
  readonly shared: boolean;
  /** A semaphore's permits; 0 for a lock. */
  readonly count: number;
  /** Aborted when the lock is lost; its reason is a LostError (a RevokedError when taken away). */
  readonly signal: AbortSignal;
  /** The session that keeps it alive; null with a watchdog of its own (or none). */
  readonly session: Session | null;
  readonly lost: boolean;
  readonly lostError: LostError | null;
  /** The end of the lease on performance.now()'s clock. */
  readonly validUntil: number;
  /** The ttl the next extend asks for, in ms. */
  readonly ttl: number;
  /** Rejects with LostError when no longer held, LimitError when the hold limit refuses. Attached to a session: checks only. */
  extend(ttl?: number): Promise<void>;
  /** true released, false already gone. Safe to call again after a connection error. */
  release(): Promise<boolean>;
  /** LOCK.GUARD: the command's reply, or LostError (nothing ran). */
  guard(...command: Array<string | number | Buffer>): Promise<unknown>;
}

/** One server lease that keeps every hold of one ttl (on one node) alive with one keepalive. */
export class Session {
  /** The lease's id: a secret (whoever knows it can revoke every hold). Never log it. */
  readonly id: string;
  /** The master it lives on ("" outside a cluster). */
  readonly node: string;
  /** The lease's ttl in ms. */
  readonly ttl: number;
  /** Holds attached now. */
  readonly holds: number;
  /** The end of the lease on performance.now()'s clock. */
  readonly validUntil: number;
  /** Aborted once it ended, after every hold was told; its reason is a LostError. */
  readonly signal: AbortSignal;
  /** null while it lives; why it ended, once it has. */
  readonly ended: LostError | null;
}

export class Semaphore {
  readonly key: string | Buffer;
  readonly limit: number;
  acquire(ttl: number, options?: PermitOptions): Promise<Lock>;
  using<T>(ttl: number, routine: Routine<T>): Promise<T>;
  using<T>(ttl: number, options: PermitOptions, routine: Routine<T>): Promise<T>;
  info(): Promise<SemaphoreInfo | null>;
}

export interface ElectionOptions {
  owner?: string | Buffer;
  /** Ms one LOCK.OBSERVE blocks on the server (default 30000). */
  observeTimeout?: number;
}

export class Election {
  readonly key: string | Buffer;
  readonly ttl: number;
  /** Waits in the queue (no limit, or `timeout` ms) and returns the leader's Lock. */
  campaign(options?: { timeout?: number; signal?: AbortSignal; watchdog?: boolean }): Promise<Lock>;
  leader(): Promise<Leader | null>;
  /** The leader now, then each change (null: nobody leads). */
  observe(options?: { signal?: AbortSignal }): AsyncGenerator<Leader | null, void, undefined>;
}

export function keySlot(key: string | Buffer): number;

export class LockError extends Error {}
export class NotAcquiredError extends LockError {}
export type LostReason = "refused" | "expired" | "limit" | "revoked";
export class LostError extends LockError {
  constructor(reason: LostReason, message?: string);
  readonly reason: LostReason;
}
/** Taken away on the server: LOCK.REVOKE (its reason), or the session's lease revoked ("lease revoked"). */
export class RevokedError extends LostError {
  constructor(revokedReason: string);
  readonly reason: "revoked";
  readonly revokedReason: string;
}
export class ServerError extends LockError {
  /** The reply's first word: ERR, WRONGTYPE, NOPERM, CROSSSLOT ... */
  readonly code: string;
}
export class LimitError extends ServerError {}
export class TimeoutError extends LockError {}
/** NOSYNC: `acked` of `wanted` replicas acknowledged in time; `undone`: the grant was given back (nothing is held). */
export class NotReplicatedError extends ServerError {
  readonly acked: number | null;
  readonly wanted: number | null;
  readonly undone: boolean;
}
/** The server's lock module is missing (`found` 0) or older than `needed` (MODULE LIST's ver). */
export class ModuleVersionError extends LockError {
  readonly found: number;
  readonly needed: number;
}
/** The oldest lock module the package drives, as MODULE LIST reports it (400: 0.4.0). */
export const MIN_MODULE_VERSION: number;
