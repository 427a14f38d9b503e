//! Every error reply the module can send.
//!
//! Each message begins with a code (`ERR`, `WRONGTYPE`) so clients can match on
//! it, and names the argument at fault where there is one. The messages are
//! `&'static CStr` literals: replying with one never allocates.

use std::ffi::CStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockError {
    ArityAcquire,
    ArityExtend,
    ArityRelease,
    ArityInfo,
    AritySetState,
    ArityGuard,
    ArityQueue,
    ArityObserve,
    /// LOCK.GUARD: the token does not hold the lock, which is free.
    LostFree,
    /// LOCK.GUARD: the token does not hold the lock; another token does.
    LostOther,
    /// LOCK.GUARD of a command that blocks (`BLPOP`, `WAIT`, `XREAD BLOCK`…).
    GuardBlocking,
    /// LOCK.GUARD of a command Redis refuses in scripts (`MULTI`, `EXEC`,
    /// `WATCH`, `SUBSCRIBE`…).
    GuardNoScript,
    /// LOCK.GUARD of one of the module's own commands.
    GuardLockCommand,
    /// LOCK.GUARD of `EVAL`/`FCALL` from inside a script or function.
    GuardScriptInScript,
    /// LOCK.GUARD of a command name with a NUL byte: no command has one.
    GuardUnknownCommand,
    /// LOCK.GUARD: the ACL user may not run the inner command or touch one
    /// of its keys.
    GuardNoPerm,
    /// An option that is unknown to the command.
    SyntaxUnknownOption,
    /// `TOKEN` given twice.
    SyntaxRepeatedToken,
    /// `TOKEN` as the last argument, with no value after it.
    SyntaxMissingToken,
    /// `WAIT` as the last argument, with no value after it.
    SyntaxMissingWait,
    /// `WAIT` given twice.
    SyntaxRepeatedWait,
    /// `SESSION` given twice.
    SyntaxRepeatedSession,
    /// `OWNER` as the last argument, with no value after it.
    SyntaxMissingOwner,
    /// `OWNER` given twice.
    SyntaxRepeatedOwner,
    OwnerLength,
    /// `LOCK.QUEUE … COUNT` not an integer from 1 to the maximum.
    CountInvalid,
    /// `LOCK.INFO … HOLDS` not an integer from 1 to the maximum.
    HoldsInvalid,
    /// `LOCK.OBSERVE`'s fence not 0 or a valid fence.
    ObservedFenceInvalid,
    ArityShared,
    AritySemAcquire,
    AritySemExtend,
    AritySemRelease,
    AritySemInfo,
    /// `SHARED` given twice.
    SyntaxRepeatedShared,
    /// `COUNT` given twice.
    SyntaxRepeatedCount,
    /// `COUNT` as the last argument.
    SyntaxMissingCount,
    /// A semaphore's limit not an integer from 1 to `MAX_PERMITS`.
    LimitInvalid,
    /// `SEM.ACQUIRE … COUNT n` with n not from 1 to the limit.
    PermitCountInvalid,
    /// `SEM.ACQUIRE` with another limit than the key was created with.
    LimitMismatch,
    /// The token holds the key in the other mode (no upgrade, no downgrade).
    ModeConflict,
    /// The token holds other `COUNT` of the semaphore's permits.
    CountMismatch,
    /// `lock.max-holders` holders already hold the key.
    HoldersLimit,
    /// `LOCK.SETHOLDER`/`LOCK.DELHOLDER` from a normal client.
    HolderInternal,
    ArityDelHolder,
    /// `SESSION` inside a Lua script or function, whose client never closes.
    SessionInScript,
    WaitNotInteger,
    WaitNegative,
    WaitTooLarge,
    /// A lock write on a replica that did not come from its master (a
    /// replica with `replica-read-only no`).
    ReadOnlyReplica,
    /// The master became a replica while the client waited. Redis itself
    /// force-unblocks waiters on demotion first (`UNBLOCKED …`); this is the
    /// module's answer to any waiter still queued after that.
    WaitDemoted,
    /// The key was overwritten with another type while the client waited.
    WaitWrongType,
    /// The waiter's ACL user lost access to the key while it waited.
    WaitNoPerm,
    TtlNotInteger,
    TtlNotPositive,
    TtlTooLarge,
    /// `now + ttl-ms` does not fit a 64-bit millisecond timestamp.
    TtlOverflow,
    TokenLength,
    FenceInvalid,
    DeadlineInvalid,
    GrantedInvalid,
    ExtendsInvalid,
    /// A packed state (`LOCK.SETSTATE key token state`) of the wrong length.
    StateInvalid,
    /// The next fence would pass 2^53 - 1.
    FenceExhausted,
    WrongType,
    /// `LOCK.SETSTATE` sent by a normal client rather than the master or the AOF.
    SetStateInternal,
    /// EXTEND (or a renewing ACQUIRE) would carry the lease past
    /// `lock.max-hold-ms` since the grant.
    HoldLimit,
    /// The holder has already extended `lock.max-extends` times.
    ExtendLimit,
    /// `WAIT` on a key whose queue already holds `lock.max-waiters` clients.
    WaitersLimit,
    /// `SYNC` without its numreplicas and timeout-ms.
    SyntaxMissingSync,
    /// `SYNC` given twice.
    SyntaxRepeatedSync,
    /// `SYNC`'s numreplicas not an integer from 0 to the maximum.
    SyncReplicasInvalid,
    /// `SYNC`'s timeout-ms not from 1 to the maximum (a grant nobody acknowledges must be undone some time).
    SyncTimeoutInvalid,
    /// `SYNC … AOF`: no module can see AOF fsync offsets.
    SyncAofUnsupported,
    /// `SYNC` inside MULTI or a script, where nothing may wait.
    SyncCannotWait,
    /// `LOCK.GUARD_RO … SYNC`: a read replicates nothing to wait for.
    SyncReadOnly,
    /// `LOCK.LEASE` with the wrong number of arguments.
    ArityLease,
    /// `LOCK.REVOKE` with the wrong number of arguments.
    ArityRevoke,
    /// A lease id that is not 32 lowercase hex digits.
    LeaseIdInvalid,
    /// `LEASE id` of a lease that does not exist (any more) on this server.
    NoLease,
    /// `LEASE` as the last argument.
    SyntaxMissingLease,
    /// `LEASE` given twice.
    SyntaxRepeatedLease,
    /// `LOCK.REVOKE … REASON` not 1 to 128 bytes.
    ReasonLength,
    /// `REASON` as the last argument.
    SyntaxMissingReason,
    /// `REASON` given twice.
    SyntaxRepeatedReason,
    /// `LOCK.LEASESET`/`LOCK.LEASEDEL` from a normal client.
    LeaseInternal,
    /// `LOCK.LEASESET`/`LOCK.LEASEDEL` with the wrong arguments.
    ArityLeaseSet,
    /// A token that holds the key under another lease group (or none) asks
    /// for it again under a different one.
    LeaseMismatch,
    /// A lease group's number in an effect that is not a positive integer.
    LeaseNumberInvalid,
    /// `LOCK.MACQUIRE` with too few arguments.
    ArityMAcquire,
    /// `LOCK.MRELEASE` with the wrong arguments.
    ArityMRelease,
    /// `LOCK.MEXTEND` with the wrong arguments.
    ArityMExtend,
    /// `numkeys` not a positive integer.
    NumkeysInvalid,
    /// `numkeys` above `lock.max-keys`.
    NumkeysTooMany,
    /// Fewer (or, where the count is exact, more) keys than `numkeys` says.
    NumkeysMismatch,
    /// The same key twice in one multi-key request.
    KeysDuplicate,
    /// The token holds some of the keys of a multi-key request, or all of
    /// them but not with one fence: not one multi-key grant to renew.
    PartialHold,
    /// A bug: a panic was caught before it could reach Redis.
    Internal,
}

impl LockError {
    /// Refused by the hold policy (`lock.max-hold-ms`, `lock.max-extends`):
    /// counted as a limited extension wherever it is answered.
    pub fn is_hold_limit(self) -> bool {
        matches!(self, LockError::HoldLimit | LockError::ExtendLimit)
    }

    pub fn as_cstr(self) -> &'static CStr {
        match self {
            LockError::ArityAcquire => c"ERR wrong number of arguments for 'lock.acquire' command",
            LockError::ArityExtend => c"ERR wrong number of arguments for 'lock.extend' command",
            LockError::ArityRelease => c"ERR wrong number of arguments for 'lock.release' command",
            LockError::ArityInfo => c"ERR wrong number of arguments for 'lock.info' command",
            LockError::AritySetState => {
                c"ERR wrong number of arguments for 'lock.setstate' command"
            }
            LockError::ArityGuard => c"ERR wrong number of arguments for 'lock.guard' command",
            LockError::ArityQueue => c"ERR wrong number of arguments for 'lock.queue' command",
            LockError::ArityObserve => c"ERR wrong number of arguments for 'lock.observe' command",
            LockError::LostFree => {
                c"LOST the token does not hold the lock: it is free (released, expired or deleted)"
            }
            LockError::LostOther => c"LOST the token does not hold the lock: another token holds it",
            LockError::GuardBlocking => {
                c"ERR blocking commands are not allowed in LOCK.GUARD"
            }
            LockError::GuardNoScript => {
                c"ERR this command is not allowed in LOCK.GUARD (Redis does not allow it in scripts)"
            }
            LockError::GuardLockCommand => c"ERR lock commands are not allowed in LOCK.GUARD",
            LockError::GuardScriptInScript => {
                c"ERR scripts are not allowed in LOCK.GUARD called from a script or function"
            }
            LockError::GuardUnknownCommand => {
                c"ERR unknown command in LOCK.GUARD: a command name cannot contain a NUL byte"
            }
            LockError::GuardNoPerm => {
                c"NOPERM this user has no permissions to run the guarded command or to access one of its keys"
            }
            LockError::SyntaxUnknownOption => c"ERR syntax error: unknown option",
            LockError::SyntaxRepeatedToken => c"ERR syntax error: TOKEN is given more than once",
            LockError::SyntaxMissingToken => c"ERR syntax error: TOKEN needs a value",
            LockError::SyntaxMissingWait => c"ERR syntax error: WAIT needs a value",
            LockError::SyntaxRepeatedWait => c"ERR syntax error: WAIT is given more than once",
            LockError::SessionInScript => {
                c"ERR SESSION is not allowed in scripts: the lock would be bound to the script engine, not to a connection"
            }
            LockError::SyntaxRepeatedSession => {
                c"ERR syntax error: SESSION is given more than once"
            }
            LockError::SyntaxMissingOwner => c"ERR syntax error: OWNER needs a value",
            LockError::SyntaxRepeatedOwner => c"ERR syntax error: OWNER is given more than once",
            LockError::OwnerLength => c"ERR owner must be 1 to 128 bytes long",
            LockError::CountInvalid => c"ERR COUNT must be an integer from 1 to 1000",
            LockError::HoldsInvalid => c"ERR HOLDS must be an integer from 1 to 1000",
            LockError::ObservedFenceInvalid => {
                c"ERR fence must be 0 (free) or an integer from 1 to 9007199254740991"
            }
            LockError::ArityShared => c"ERR wrong number of arguments for 'lock.setholder' command",
            LockError::AritySemAcquire => c"ERR wrong number of arguments for 'sem.acquire' command",
            LockError::AritySemExtend => c"ERR wrong number of arguments for 'sem.extend' command",
            LockError::AritySemRelease => c"ERR wrong number of arguments for 'sem.release' command",
            LockError::AritySemInfo => c"ERR wrong number of arguments for 'sem.info' command",
            LockError::SyntaxRepeatedShared => c"ERR syntax error: SHARED is given more than once",
            LockError::SyntaxRepeatedCount => c"ERR syntax error: COUNT is given more than once",
            LockError::SyntaxMissingCount => c"ERR syntax error: COUNT needs a value",
            LockError::LimitInvalid => c"ERR limit must be an integer from 1 to 1000000",
            LockError::PermitCountInvalid => {
                c"ERR COUNT must be an integer from 1 to the semaphore's limit"
            }
            LockError::LimitMismatch => {
                c"ERR limit differs from the one the semaphore was created with (SEM.INFO shows it)"
            }
            LockError::ModeConflict => {
                c"ERR this token holds the lock in the other mode: release it first (no upgrade or downgrade)"
            }
            LockError::CountMismatch => {
                c"ERR this token holds another COUNT of permits: release it first"
            }
            LockError::HoldersLimit => {
                c"LIMIT lock.max-holders reached: too many holders of this key"
            }
            LockError::HolderInternal => {
                c"ERR LOCK.SETHOLDER and LOCK.DELHOLDER are internal: only the replication link and AOF loading may call them"
            }
            LockError::ArityDelHolder => {
                c"ERR wrong number of arguments for 'lock.delholder' command"
            }
            LockError::WaitNotInteger => c"ERR timeout-ms is not an integer or out of range",
            LockError::WaitNegative => c"ERR timeout-ms must be 0 (no limit) or greater",
            LockError::WaitTooLarge => {
                c"ERR timeout-ms exceeds the maximum of 31536000000 (365 days)"
            }
            LockError::ReadOnlyReplica => c"READONLY You can't write against a read only replica.",
            LockError::WaitDemoted => {
                c"READONLY this server became a replica while the client waited for the lock"
            }
            LockError::WaitWrongType => {
                c"WRONGTYPE the key was overwritten with another type while the client waited"
            }
            LockError::WaitNoPerm => {
                c"NOPERM this user lost access to the key while the client waited for the lock"
            }
            LockError::TtlNotInteger => c"ERR ttl-ms is not an integer or out of range",
            LockError::TtlNotPositive => c"ERR ttl-ms must be greater than 0",
            LockError::TtlTooLarge => {
                c"ERR ttl-ms exceeds lock.max-ttl-ms (CONFIG GET lock.max-ttl-ms shows it)"
            }
            LockError::TtlOverflow => c"ERR ttl-ms overflows when added to the current time",
            LockError::TokenLength => c"ERR token must be 1 to 256 bytes long",
            LockError::FenceInvalid => c"ERR fence must be an integer from 1 to 9007199254740991",
            LockError::DeadlineInvalid => {
                c"ERR deadline-ms must be -1 or a unix time in milliseconds"
            }
            LockError::GrantedInvalid => c"ERR granted-ms must be a unix time in milliseconds",
            LockError::ExtendsInvalid => c"ERR extends must be an integer from 0 to 4294967295",
            LockError::StateInvalid => c"ERR state is not a packed state of this command",
            LockError::FenceExhausted => {
                c"ERR fence space exhausted: the next fence would exceed 2^53-1"
            }
            LockError::WrongType => {
                c"WRONGTYPE Operation against a key holding the wrong kind of value"
            }
            LockError::SetStateInternal => {
                c"ERR LOCK.SETSTATE is internal: only the replication link and AOF loading may call it"
            }
            LockError::HoldLimit => {
                c"LIMIT lock.max-hold-ms reached: the lease was not extended and ends at its current deadline"
            }
            LockError::ExtendLimit => {
                c"LIMIT lock.max-extends reached: the lease was not extended and ends at its current deadline"
            }
            LockError::WaitersLimit => c"LIMIT lock.max-waiters reached: too many clients wait for this key",
            LockError::SyntaxMissingSync => {
                c"ERR syntax error: SYNC needs numreplicas and timeout-ms"
            }
            LockError::SyntaxRepeatedSync => {
                c"ERR syntax error: SYNC is given more than once"
            }
            LockError::SyncReplicasInvalid => {
                c"ERR SYNC numreplicas must be an integer from 0 to 1000"
            }
            LockError::SyncTimeoutInvalid => {
                c"ERR SYNC timeout-ms must be an integer from 1 to 31536000000"
            }
            LockError::SyncAofUnsupported => {
                c"ERR SYNC AOF is not supported: the module API shows no AOF fsync offsets (send WAITAOF after the reply)"
            }
            LockError::SyncCannotWait => {
                c"ERR SYNC cannot wait inside MULTI/EXEC or a script: send the command on its own (nothing was changed)"
            }
            LockError::SyncReadOnly => {
                c"ERR SYNC is not an option of LOCK.GUARD_RO: a read replicates nothing to wait for"
            }
            LockError::ArityLease => {
                c"ERR wrong number of arguments for 'lock.lease' command"
            }
            LockError::ArityRevoke => {
                c"ERR wrong number of arguments for 'lock.revoke' command"
            }
            LockError::LeaseIdInvalid => {
                c"ERR lease id must be 32 lowercase hex digits (what LOCK.LEASE GRANT replied)"
            }
            LockError::NoLease => {
                c"NOLEASE the lease does not exist: it expired, was revoked, or was granted by another server"
            }
            LockError::SyntaxMissingLease => {
                c"ERR syntax error: LEASE needs a lease id"
            }
            LockError::SyntaxRepeatedLease => {
                c"ERR syntax error: LEASE is given more than once"
            }
            LockError::ReasonLength => {
                c"ERR REASON must be 1 to 128 bytes long"
            }
            LockError::SyntaxMissingReason => c"ERR syntax error: REASON needs a value",
            LockError::SyntaxRepeatedReason => {
                c"ERR syntax error: REASON is given more than once"
            }
            LockError::LeaseInternal => {
                c"ERR LOCK.LEASESET and LOCK.LEASEDEL are internal: only the replication link and AOF loading may call them"
            }
            LockError::LeaseMismatch => {
                c"ERR this token already holds the key under another LEASE (or none): release it first"
            }
            LockError::LeaseNumberInvalid => {
                c"ERR LEASE number must be a positive integer"
            }
            LockError::ArityLeaseSet => {
                c"ERR wrong number of arguments for 'lock.leaseset' command"
            }
            LockError::ArityMAcquire => {
                c"ERR wrong number of arguments for 'lock.macquire' command"
            }
            LockError::ArityMRelease => {
                c"ERR wrong number of arguments for 'lock.mrelease' command"
            }
            LockError::ArityMExtend => {
                c"ERR wrong number of arguments for 'lock.mextend' command"
            }
            LockError::NumkeysInvalid => {
                c"ERR numkeys must be a positive integer"
            }
            LockError::NumkeysTooMany => {
                c"ERR numkeys is more than lock.max-keys"
            }
            LockError::NumkeysMismatch => {
                c"ERR numkeys does not match the number of keys given"
            }
            LockError::KeysDuplicate => {
                c"ERR the same key is given more than once"
            }
            LockError::PartialHold => {
                c"ERR this token holds only some of these keys, or not as one grant: release them first"
            }
            LockError::Internal => c"ERR internal error in redis-lock (see the server log)",
        }
    }

    /// The message as text, for logs and tests.
    pub fn as_str(self) -> &'static str {
        // Every literal above is ASCII.
        self.as_cstr().to_str().unwrap_or("ERR")
    }
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for LockError {}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [LockError; 97] = [
        LockError::ArityMAcquire,
        LockError::ArityMRelease,
        LockError::ArityMExtend,
        LockError::NumkeysInvalid,
        LockError::NumkeysTooMany,
        LockError::NumkeysMismatch,
        LockError::KeysDuplicate,
        LockError::PartialHold,
        LockError::LeaseNumberInvalid,
        LockError::LeaseMismatch,
        LockError::HolderInternal,
        LockError::ArityDelHolder,
        LockError::ArityShared,
        LockError::AritySemAcquire,
        LockError::AritySemExtend,
        LockError::AritySemRelease,
        LockError::AritySemInfo,
        LockError::SyntaxRepeatedShared,
        LockError::SyntaxRepeatedCount,
        LockError::SyntaxMissingCount,
        LockError::LimitInvalid,
        LockError::PermitCountInvalid,
        LockError::LimitMismatch,
        LockError::ModeConflict,
        LockError::CountMismatch,
        LockError::HoldersLimit,
        LockError::ArityQueue,
        LockError::ArityObserve,
        LockError::SyntaxMissingOwner,
        LockError::SyntaxRepeatedOwner,
        LockError::OwnerLength,
        LockError::CountInvalid,
        LockError::HoldsInvalid,
        LockError::ObservedFenceInvalid,
        LockError::GuardScriptInScript,
        LockError::ArityGuard,
        LockError::LostFree,
        LockError::LostOther,
        LockError::GuardBlocking,
        LockError::GuardNoScript,
        LockError::GuardLockCommand,
        LockError::GuardNoPerm,
        LockError::GuardUnknownCommand,
        LockError::SessionInScript,
        LockError::WaitNoPerm,
        LockError::GrantedInvalid,
        LockError::ExtendsInvalid,
        LockError::StateInvalid,
        LockError::SyntaxRepeatedSession,
        LockError::HoldLimit,
        LockError::ExtendLimit,
        LockError::WaitersLimit,
        LockError::ReadOnlyReplica,
        LockError::SyntaxMissingWait,
        LockError::SyntaxRepeatedWait,
        LockError::WaitNotInteger,
        LockError::WaitNegative,
        LockError::WaitTooLarge,
        LockError::WaitDemoted,
        LockError::WaitWrongType,
        LockError::ArityAcquire,
        LockError::ArityExtend,
        LockError::ArityRelease,
        LockError::ArityInfo,
        LockError::AritySetState,
        LockError::SyntaxUnknownOption,
        LockError::SyntaxRepeatedToken,
        LockError::SyntaxMissingToken,
        LockError::TtlNotInteger,
        LockError::TtlNotPositive,
        LockError::TtlTooLarge,
        LockError::TtlOverflow,
        LockError::TokenLength,
        LockError::FenceInvalid,
        LockError::DeadlineInvalid,
        LockError::FenceExhausted,
        LockError::WrongType,
        LockError::SetStateInternal,
        LockError::SyntaxMissingSync,
        LockError::SyntaxRepeatedSync,
        LockError::SyncReplicasInvalid,
        LockError::SyncTimeoutInvalid,
        LockError::SyncAofUnsupported,
        LockError::SyncCannotWait,
        LockError::SyncReadOnly,
        LockError::ArityLease,
        LockError::ArityRevoke,
        LockError::LeaseIdInvalid,
        LockError::NoLease,
        LockError::SyntaxMissingLease,
        LockError::SyntaxRepeatedLease,
        LockError::ReasonLength,
        LockError::SyntaxMissingReason,
        LockError::SyntaxRepeatedReason,
        LockError::LeaseInternal,
        LockError::ArityLeaseSet,
        LockError::Internal,
    ];

    /// Fails to compile when a variant is added: add it to `ALL` too.
    #[allow(dead_code)]
    fn every_variant_is_listed(e: LockError) {
        match e {
            LockError::ArityAcquire
            | LockError::ArityExtend
            | LockError::ArityRelease
            | LockError::ArityInfo
            | LockError::AritySetState
            | LockError::ArityGuard
            | LockError::ArityQueue
            | LockError::ArityObserve
            | LockError::LostFree
            | LockError::LostOther
            | LockError::GuardBlocking
            | LockError::GuardNoScript
            | LockError::GuardLockCommand
            | LockError::GuardScriptInScript
            | LockError::GuardNoPerm
            | LockError::GuardUnknownCommand
            | LockError::SyntaxUnknownOption
            | LockError::SyntaxRepeatedToken
            | LockError::SyntaxMissingToken
            | LockError::SyntaxMissingWait
            | LockError::SyntaxRepeatedWait
            | LockError::WaitNotInteger
            | LockError::WaitNegative
            | LockError::WaitTooLarge
            | LockError::ReadOnlyReplica
            | LockError::WaitDemoted
            | LockError::WaitWrongType
            | LockError::WaitNoPerm
            | LockError::TtlNotInteger
            | LockError::TtlNotPositive
            | LockError::TtlTooLarge
            | LockError::TtlOverflow
            | LockError::TokenLength
            | LockError::FenceInvalid
            | LockError::DeadlineInvalid
            | LockError::FenceExhausted
            | LockError::WrongType
            | LockError::SetStateInternal
            | LockError::SyntaxRepeatedSession
            | LockError::SyntaxMissingOwner
            | LockError::SyntaxRepeatedOwner
            | LockError::OwnerLength
            | LockError::CountInvalid
            | LockError::HoldsInvalid
            | LockError::ObservedFenceInvalid
            | LockError::ArityShared
            | LockError::AritySemAcquire
            | LockError::AritySemExtend
            | LockError::AritySemRelease
            | LockError::AritySemInfo
            | LockError::SyntaxRepeatedShared
            | LockError::SyntaxRepeatedCount
            | LockError::SyntaxMissingCount
            | LockError::LimitInvalid
            | LockError::PermitCountInvalid
            | LockError::LimitMismatch
            | LockError::ModeConflict
            | LockError::CountMismatch
            | LockError::HoldersLimit
            | LockError::HolderInternal
            | LockError::ArityDelHolder
            | LockError::SessionInScript
            | LockError::GrantedInvalid
            | LockError::ExtendsInvalid
            | LockError::StateInvalid
            | LockError::HoldLimit
            | LockError::ExtendLimit
            | LockError::WaitersLimit
            | LockError::SyntaxMissingSync
            | LockError::SyntaxRepeatedSync
            | LockError::SyncReplicasInvalid
            | LockError::SyncTimeoutInvalid
            | LockError::SyncAofUnsupported
            | LockError::SyncCannotWait
            | LockError::SyncReadOnly
            | LockError::ArityLease
            | LockError::ArityRevoke
            | LockError::LeaseIdInvalid
            | LockError::NoLease
            | LockError::SyntaxMissingLease
            | LockError::SyntaxRepeatedLease
            | LockError::ReasonLength
            | LockError::SyntaxMissingReason
            | LockError::SyntaxRepeatedReason
            | LockError::LeaseInternal
            | LockError::ArityLeaseSet
            | LockError::LeaseMismatch
            | LockError::LeaseNumberInvalid
            | LockError::ArityMAcquire
            | LockError::ArityMRelease
            | LockError::ArityMExtend
            | LockError::NumkeysInvalid
            | LockError::NumkeysTooMany
            | LockError::NumkeysMismatch
            | LockError::KeysDuplicate
            | LockError::PartialHold
            | LockError::Internal => {}
        }
    }

    #[test]
    fn every_error_begins_with_a_code() {
        let distinct: std::collections::HashSet<&str> = ALL.iter().map(|e| e.as_str()).collect();
        assert_eq!(distinct.len(), ALL.len(), "ALL lists a variant twice");
        for e in ALL {
            let s = e.as_str();
            let coded = [
                "ERR ",
                "WRONGTYPE ",
                "READONLY ",
                "LIMIT ",
                "NOPERM ",
                "LOST ",
                "NOLEASE ",
            ];
            assert!(coded.iter().any(|c| s.starts_with(c)), "{s}");
            assert!(!s.contains('\n') && !s.contains('\r'), "{s}");
        }
    }
}
