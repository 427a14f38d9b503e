// The package's ES module entry (package.json "exports" "import"): the
// CommonJS package's own objects under their names, so that one copy of
// each class exists whichever way it is loaded (instanceof works across
// require and import).
import lockClient from "./index.js";

export const {
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
} = lockClient;

export default lockClient;
