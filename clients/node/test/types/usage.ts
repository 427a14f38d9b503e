// Compiled (never run) by types.test.js: the README's uses of the package
// must type-check against index.d.ts, and the misuses marked @ts-expect-error
// must not.
import { Locks, Lock, Leader, LostError, RevokedError, NotAcquiredError, NotReplicatedError, ModuleVersionError, ServerError, LockInfo, Driver, Session, keySlot, MIN_MODULE_VERSION } from "../../index";

declare const client: { sendCommand(args: Array<string | Buffer>): Promise<unknown>; duplicate(overrides?: object): unknown };

async function usage(): Promise<number> {
  const locks = new Locks(client, { safetyMargin: 0.1, commandTimeout: 5000, keepalive: "auto" });
  const fence: number = await locks.using("billing", 10000, async (signal: AbortSignal, lock: Lock) => {
    if (signal.aborted) throw signal.reason;
    await lock.guard("INCRBY", "{billing}:total", 6000);
    return lock.fence;
  });
  await locks.using("billing", 10000, { wait: 30000, owner: "host-a" }, async () => undefined);
  const controller = new AbortController();
  const lock = await locks.acquire("billing", 10000, { wait: 30000, signal: controller.signal, shared: false });
  await lock.extend();
  await lock.extend(20000);
  const session: Session | null = lock.session;
  const holds: number = session ? session.holds : 0;
  if (lock.signal.reason instanceof RevokedError) console.log(lock.signal.reason.revokedReason);
  const ended: number = await locks.revoke("billing", "stuck since 03:00");
  const released: boolean = await lock.release();
  const many = await locks.acquireMany(["{order}stock", "{order}payment"], 10000, { sync: { replicas: 1, timeout: 2000 } });
  const keys: Array<string | Buffer> = many.keys;
  await many.release();
  try {
    await locks.acquire("billing", 10000, { sync: { replicas: 1, timeout: 500 } });
  } catch (err) {
    if (err instanceof NotReplicatedError && err.undone) console.log(err.acked, err.wanted, keys.length);
    if (err instanceof ModuleVersionError) console.log(err.found, err.needed, MIN_MODULE_VERSION);
  }
  const info: LockInfo | null = await locks.info("billing");
  const permits = await locks.semaphore("renders", 4).acquire(10000, { count: 2, wait: 1000 });
  const count: number = permits.count;
  const election = locks.election("leader", 10000, { owner: "host-a" });
  const leading = await election.campaign({ timeout: 5000 });
  for await (const leader of election.observe({ signal: controller.signal })) {
    const seen: Leader | null = leader;
    if (seen !== null && seen.owner === "host-a") break;
  }
  await leading.release();
  try {
    await locks.acquire("billing", 1000);
  } catch (err) {
    if (err instanceof NotAcquiredError) return 0;
    if (err instanceof LostError) return err.reason === "expired" ? 1 : 2;
    if (err instanceof ServerError) return err.code.length;
  }
  const custom: Driver = { send: async () => null, dedicated: async () => ({ send: async () => null, close: async () => undefined }) };
  new Locks(custom);
  // @ts-expect-error ttl is a number of ms
  await locks.acquire("billing", "10s");
  // @ts-expect-error a lost reason is one of four
  const reason: LostError["reason"] = "gone";
  // @ts-expect-error a keepalive mode is one of three
  new Locks(client, { keepalive: "sometimes" });
  // @ts-expect-error the token is read-only
  lock.token = "x";
  return fence + keySlot("billing") + (released ? 1 : 0) + (info ? info.fence : 0) + count + reason.length + holds + ended;
}

export { usage };
