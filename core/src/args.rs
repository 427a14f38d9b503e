//! Parsing each command's arguments, once, into a typed struct.
//!
//! The parsers work on byte slices, so they are tested without a server. They
//! check everything a command can check before it touches the keyspace,
//! including the configured `lock.max-ttl-ms` (passed in): a command that gets
//! an `Err` here replies with it and changes nothing.
//! `args[0]` is the command name and `args[1]` the key, as Redis passes them.

use crate::effect::{self, Permits};
use crate::errors::LockError;
use crate::group::LeaseId;
use crate::rules;

/// Anything a command argument can be read from.
pub trait ArgBytes {
    fn bytes(&self) -> &[u8];
}

impl ArgBytes for &[u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl ArgBytes for &str {
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION]
/// [OWNER label]`
#[derive(Debug, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub ttl_ms: i64,
    /// `None`: the server draws a UUIDv4.
    pub token: Option<&'a [u8]>,
    /// `None`: do not wait. `Some(0)`: wait without a time limit.
    pub wait_ms: Option<i64>,
    /// Also release the lock when the acquiring connection closes.
    pub session: bool,
    /// A public label for the holder (a host, a pod, a job id), shown by
    /// `LOCK.INFO` and `LOCK.QUEUE`; never secret, unlike the token.
    pub owner: Option<&'a [u8]>,
    /// `SHARED`: a read lease beside other readers.
    pub shared: bool,
    /// `SYNC numreplicas timeout-ms`: answer only once that many replicas
    /// hold the grant (none for `SYNC 0 …`, which is the same as no option).
    pub sync: Option<Sync>,
    /// `LEASE id`: the hold is attached to this lease group, and lives as
    /// long as it does.
    pub lease: Option<LeaseId>,
}

/// `LOCK.LEASE GRANT ttl-ms [OWNER label]`
#[derive(Debug, PartialEq, Eq)]
pub struct LeaseGrantArgs<'a> {
    pub ttl_ms: i64,
    pub owner: Option<&'a [u8]>,
}

/// `LOCK.LEASE GRANT ttl-ms [OWNER label]` (arguments from the subcommand
/// on); `max_ttl_ms` is `lock.max-ttl-ms`.
pub fn parse_lease_grant<A: ArgBytes>(
    args: &[A],
    max_ttl_ms: i64,
) -> Result<LeaseGrantArgs<'_>, LockError> {
    let (ttl, rest) = match args {
        [_, _, ttl, rest @ ..] => (ttl, rest),
        _ => return Err(LockError::ArityLease),
    };
    let ttl_ms = parse_ttl(ttl.bytes())?;
    // As the acquire's options read (`parse_options`): a missing value
    // first, then a repeated option.
    let mut owner = None;
    let mut rest = rest.iter();
    while let Some(option) = rest.next() {
        if !option.bytes().eq_ignore_ascii_case(b"OWNER") {
            return Err(LockError::SyntaxUnknownOption);
        }
        let label = rest.next().ok_or(LockError::SyntaxMissingOwner)?;
        if owner.is_some() {
            return Err(LockError::SyntaxRepeatedOwner);
        }
        owner = Some(rules::check_owner(label.bytes())?);
    }
    Ok(LeaseGrantArgs {
        ttl_ms: rules::check_ttl_limit(ttl_ms, max_ttl_ms)?,
        owner,
    })
}

/// `LOCK.LEASE KEEPALIVE|END|REVOKE|INFO id`: the lease's id.
pub fn parse_lease_id<A: ArgBytes>(args: &[A]) -> Result<LeaseId, LockError> {
    match args {
        [_, _, id] => LeaseId::parse(id.bytes()).ok_or(LockError::LeaseIdInvalid),
        _ => Err(LockError::ArityLease),
    }
}

/// `LOCK.REVOKE key [REASON text]`: the reason, if given (1 to 128 bytes).
/// The option reads as the acquire's do (`parse_options`).
pub fn parse_revoke<A: ArgBytes>(args: &[A]) -> Result<Option<&[u8]>, LockError> {
    let [_, _, options @ ..] = args else {
        return Err(LockError::ArityRevoke);
    };
    let mut reason = None;
    let mut rest = options.iter();
    while let Some(option) = rest.next() {
        if !option.bytes().eq_ignore_ascii_case(b"REASON") {
            return Err(LockError::SyntaxUnknownOption);
        }
        let text = rest.next().ok_or(LockError::SyntaxMissingReason)?;
        if reason.is_some() {
            return Err(LockError::SyntaxRepeatedReason);
        }
        let text = text.bytes();
        if !(1..=rules::MAX_OWNER_LEN).contains(&text.len()) {
            return Err(LockError::ReasonLength);
        }
        reason = Some(text);
    }
    Ok(reason)
}

/// `LOCK.LEASE HELP`: no argument after it.
pub fn parse_lease_help<A: ArgBytes>(args: &[A]) -> Result<(), LockError> {
    match args {
        [_, _] => Ok(()),
        _ => Err(LockError::ArityLease),
    }
}

/// `SYNC numreplicas timeout-ms`: a grant (or an extension, or a guarded
/// write) is answered only once `replicas` replicas have acknowledged the
/// replication offset that carries it, as `WAIT` counts them; after
/// `timeout_ms` without them, a grant is undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sync {
    pub replicas: u32,
    pub timeout_ms: i64,
}

/// The most replicas `SYNC` may wait for (the error message says so).
pub const MAX_SYNC_REPLICAS: u32 = 1000;
const _: () = assert!(MAX_SYNC_REPLICAS == 1000);

/// `SYNC numreplicas timeout-ms` from `rest` (after the word `SYNC`): `None`
/// for `SYNC 0 …`. `AOF` after them asks for the replicas' and the local
/// AOF fsync as well, which no module can see (docs/operations.md): refused.
fn parse_sync<'a, A: ArgBytes + 'a>(
    rest: &mut impl Iterator<Item = &'a A>,
) -> Result<Option<Sync>, LockError> {
    let (Some(replicas), Some(timeout)) = (rest.next(), rest.next()) else {
        return Err(LockError::SyntaxMissingSync);
    };
    let replicas = parse_i64(replicas.bytes())
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n <= MAX_SYNC_REPLICAS)
        .ok_or(LockError::SyncReplicasInvalid)?;
    let timeout_ms = parse_i64(timeout.bytes())
        .filter(|t| (1..=rules::MAX_WAIT_MS).contains(t))
        .ok_or(LockError::SyncTimeoutInvalid)?;
    Ok((replicas > 0).then_some(Sync {
        replicas,
        timeout_ms,
    }))
}

/// `SEM.ACQUIRE key limit ttl-ms [COUNT n] [TOKEN token] [WAIT timeout-ms]
/// [SESSION] [OWNER label]`: the options of `LOCK.ACQUIRE` (in
/// [`SemAcquireArgs::lock`], whose `shared` is always false), plus the
/// semaphore's limit and the permits taken.
#[derive(Debug, PartialEq, Eq)]
pub struct SemAcquireArgs<'a> {
    pub limit: u32,
    pub count: u32,
    pub lock: AcquireArgs<'a>,
}

/// The most permits a semaphore may have (the error message says so).
pub const MAX_PERMITS: u32 = 1_000_000;
const _: () = assert!(MAX_PERMITS == 1_000_000);

/// `LOCK.SETHOLDER key limit count token fence deadline-ms granted-ms extends
/// [OWNER label]`: one holder of a shared lock (`limit` 0) or of a
/// semaphore, as the master replicates it and the AOF records it.
#[derive(Debug, PartialEq, Eq)]
pub struct SetHolderArgs<'a> {
    pub limit: u32,
    pub count: u32,
    pub token: &'a [u8],
    pub fence: u64,
    pub deadline_ms: i64,
    pub granted_ms: i64,
    pub extends: u32,
    pub owner: Option<&'a [u8]>,
    /// `LEASE number`: the lease group the hold is attached to.
    pub lease: Option<u64>,
}

/// `LOCK.QUEUE key [COUNT n]`
#[derive(Debug, PartialEq, Eq)]
pub struct QueueArgs {
    /// How many waiters to list, from the head (default 10).
    pub count: usize,
}

/// Most waiters one `LOCK.QUEUE` lists (the error message says so).
pub const MAX_QUEUE_COUNT: usize = 1000;
const _: () = assert!(MAX_QUEUE_COUNT == 1000);

/// `LOCK.OBSERVE key fence timeout-ms`
#[derive(Debug, PartialEq, Eq)]
pub struct ObserveArgs {
    /// The holder fence the caller last saw; 0 for "free".
    pub fence: u64,
    /// How long to wait for a change; 0 waits without a limit.
    pub timeout_ms: i64,
}

/// `LOCK.EXTEND key token ttl-ms [SYNC numreplicas timeout-ms]`
#[derive(Debug, PartialEq, Eq)]
pub struct ExtendArgs<'a> {
    pub token: &'a [u8],
    pub ttl_ms: i64,
    pub sync: Option<Sync>,
}

/// `LOCK.RELEASE key token`
#[derive(Debug, PartialEq, Eq)]
pub struct ReleaseArgs<'a> {
    pub token: &'a [u8],
}

/// `LOCK.SETSTATE key token fence deadline-ms [granted-ms [extends]]`: the
/// state of a lock after a grant or an extension, as the master replicates it
/// and the AOF records it. `extends` left out is 0 (a grant). Without
/// `granted-ms` (the form of version 0.1, before the hold policy), the grant
/// time is taken as the time the command is applied.
#[derive(Debug, PartialEq, Eq)]
pub struct SetStateArgs<'a> {
    pub token: &'a [u8],
    pub fence: u64,
    /// Absolute unix time in ms, or `None` (sent as -1) for no expiry, which
    /// an AOF rewrite uses because Redis appends the key's `PEXPIREAT` itself.
    pub deadline_ms: Option<i64>,
    /// When the holder was granted the lock (unix ms); `None` in the short form.
    pub granted_ms: Option<i64>,
    pub extends: u32,
    /// The holder's label, `OWNER label` after `extends`.
    pub owner: Option<&'a [u8]>,
    /// `LEASE number` after `extends`: the lease group the hold is attached
    /// to.
    pub lease: Option<u64>,
}

/// `LOCK.GUARD key token [SYNC numreplicas timeout-ms] command [arg ...]`:
/// the inner command is `args[command_at..]`, passed on as it came.
#[derive(Debug, PartialEq, Eq)]
pub struct GuardArgs<'a> {
    pub token: &'a [u8],
    pub sync: Option<Sync>,
    /// Where the guarded command starts in the arguments.
    pub command_at: usize,
}

/// Where the guarded command starts in `LOCK.GUARD`'s arguments without
/// `SYNC`.
pub const GUARDED_COMMAND: usize = 3;

/// Where the guarded command starts: after `SYNC n t` when the word right
/// after the token is `SYNC` with anything after it (Redis' own `SYNC`
/// takes no arguments, and is never allowed in `LOCK.GUARD`), else right
/// after the token. Also what the key positions (Cluster, ACLs, `COMMAND
/// GETKEYS`) count from, before anything is checked.
pub fn guarded_command_at<A: ArgBytes>(args: &[A]) -> usize {
    match args.get(GUARDED_COMMAND) {
        Some(word) if word.bytes().eq_ignore_ascii_case(b"SYNC") && args.len() > 4 => {
            GUARDED_COMMAND + 3
        }
        _ => GUARDED_COMMAND,
    }
}

pub fn parse_guard<A: ArgBytes>(args: &[A]) -> Result<GuardArgs<'_>, LockError> {
    if args.len() <= GUARDED_COMMAND {
        return Err(LockError::ArityGuard);
    }
    let token = rules::check_token(args[2].bytes())?;
    let command_at = guarded_command_at(args);
    let sync = match command_at {
        GUARDED_COMMAND => None,
        _ => parse_sync(&mut args[GUARDED_COMMAND + 1..].iter())?,
    };
    if args.len() <= command_at {
        return Err(LockError::ArityGuard);
    }
    Ok(GuardArgs {
        token,
        sync,
        command_at,
    })
}

/// The options `LOCK.ACQUIRE` and `SEM.ACQUIRE` share, in any order and any
/// case, each at most once.
struct Options<'a> {
    token: Option<&'a [u8]>,
    wait_ms: Option<i64>,
    session: bool,
    owner: Option<&'a [u8]>,
    shared: bool,
    count: Option<u32>,
    sync: Option<Sync>,
    lease: Option<LeaseId>,
}

/// `shared_allowed`: `SHARED` is an option (LOCK.ACQUIRE); `count_limit`:
/// `COUNT` is, from 1 to it (SEM.ACQUIRE).
fn parse_options<A: ArgBytes>(
    options: &[A],
    shared_allowed: bool,
    count_limit: Option<u32>,
) -> Result<Options<'_>, LockError> {
    let mut parsed = Options {
        token: None,
        wait_ms: None,
        session: false,
        owner: None,
        shared: false,
        count: None,
        sync: None,
        lease: None,
    };
    let mut sync_given = false;
    let mut rest = options.iter();
    while let Some(option) = rest.next() {
        // Read once: the bytes of a server argument are a call into Redis.
        let word = option.bytes();
        let is = |name: &[u8]| word.eq_ignore_ascii_case(name);
        if is(b"TOKEN") {
            let value = rest.next().ok_or(LockError::SyntaxMissingToken)?;
            if parsed.token.is_some() {
                return Err(LockError::SyntaxRepeatedToken);
            }
            parsed.token = Some(rules::check_token(value.bytes())?);
        } else if is(b"WAIT") {
            let value = rest.next().ok_or(LockError::SyntaxMissingWait)?;
            if parsed.wait_ms.is_some() {
                return Err(LockError::SyntaxRepeatedWait);
            }
            let value = parse_i64(value.bytes()).ok_or(LockError::WaitNotInteger)?;
            parsed.wait_ms = Some(rules::check_wait(value)?);
        } else if is(b"SESSION") {
            if parsed.session {
                return Err(LockError::SyntaxRepeatedSession);
            }
            parsed.session = true;
        } else if is(b"OWNER") {
            let value = rest.next().ok_or(LockError::SyntaxMissingOwner)?;
            if parsed.owner.is_some() {
                return Err(LockError::SyntaxRepeatedOwner);
            }
            parsed.owner = Some(rules::check_owner(value.bytes())?);
        } else if is(b"SHARED") && shared_allowed {
            if parsed.shared {
                return Err(LockError::SyntaxRepeatedShared);
            }
            parsed.shared = true;
        } else if is(b"SYNC") {
            if sync_given {
                return Err(LockError::SyntaxRepeatedSync);
            }
            sync_given = true;
            parsed.sync = parse_sync(&mut rest)?;
        } else if is(b"LEASE") {
            let value = rest.next().ok_or(LockError::SyntaxMissingLease)?;
            if parsed.lease.is_some() {
                return Err(LockError::SyntaxRepeatedLease);
            }
            parsed.lease = Some(LeaseId::parse(value.bytes()).ok_or(LockError::LeaseIdInvalid)?);
        } else if is(b"AOF") && sync_given {
            return Err(LockError::SyncAofUnsupported);
        } else if let (true, Some(limit)) = (is(b"COUNT"), count_limit) {
            let value = rest.next().ok_or(LockError::SyntaxMissingCount)?;
            if parsed.count.is_some() {
                return Err(LockError::SyntaxRepeatedCount);
            }
            parsed.count = Some(
                parse_i64(value.bytes())
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| (1..=limit).contains(n))
                    .ok_or(LockError::PermitCountInvalid)?,
            );
        } else {
            return Err(LockError::SyntaxUnknownOption);
        }
    }
    Ok(parsed)
}

/// `max_ttl_ms` is `lock.max-ttl-ms`, checked once the syntax is known good.
pub fn parse_acquire<A: ArgBytes>(
    args: &[A],
    max_ttl_ms: i64,
) -> Result<AcquireArgs<'_>, LockError> {
    if args.len() < 3 {
        return Err(LockError::ArityAcquire);
    }
    let ttl_ms = parse_ttl(args[2].bytes())?;
    let options = parse_options(&args[3..], true, None)?;
    Ok(AcquireArgs {
        ttl_ms: rules::check_ttl_limit(ttl_ms, max_ttl_ms)?,
        token: options.token,
        wait_ms: options.wait_ms,
        session: options.session,
        owner: options.owner,
        shared: options.shared,
        sync: options.sync,
        lease: options.lease,
    })
}

/// `LOCK.MACQUIRE numkeys key [key ...] ttl-ms [TOKEN token] [WAIT
/// timeout-ms] [SHARED] [OWNER label] [SESSION] [SYNC n timeout-ms] [LEASE
/// id]`: the keys are `args[keys]`, distinct, and the options those of
/// `LOCK.ACQUIRE`.
#[derive(Debug, PartialEq, Eq)]
pub struct MAcquireArgs<'a> {
    pub keys: std::ops::Range<usize>,
    pub lock: AcquireArgs<'a>,
}

/// `LOCK.MRELEASE numkeys key [key ...] token`
#[derive(Debug, PartialEq, Eq)]
pub struct MReleaseArgs<'a> {
    pub keys: std::ops::Range<usize>,
    pub token: &'a [u8],
}

/// `LOCK.MEXTEND numkeys key [key ...] token ttl-ms [SYNC n timeout-ms]`
#[derive(Debug, PartialEq, Eq)]
pub struct MExtendArgs<'a> {
    pub keys: std::ops::Range<usize>,
    pub extend: ExtendArgs<'a>,
}

/// Where the keys of `command numkeys key [key ...] …` are (`args[1]` is
/// `numkeys`), as Redis' `numkeys` commands count them: `None` when
/// `numkeys` is not a positive integer or more keys than there are
/// arguments. For Cluster routing, ACL key patterns and `COMMAND GETKEYS`,
/// which ask before the command runs.
pub fn numkeys_range<A: ArgBytes>(args: &[A]) -> Option<std::ops::Range<usize>> {
    let numkeys = args.get(1).and_then(|n| parse_i64(n.bytes()))?;
    let numkeys = usize::try_from(numkeys).ok().filter(|n| *n >= 1)?;
    let end = numkeys.checked_add(2)?;
    (end <= args.len()).then_some(2..end)
}

/// The keys of a multi-key command: `numkeys` valid and at most `max_keys`,
/// followed by at least `after` more arguments, and no key twice. `arity`
/// for too few arguments to hold a `numkeys` at all.
fn parse_keys<A: ArgBytes>(
    args: &[A],
    max_keys: usize,
    after: usize,
    arity: LockError,
) -> Result<std::ops::Range<usize>, LockError> {
    if args.len() < 3 + after {
        return Err(arity);
    }
    let numkeys = parse_i64(args[1].bytes())
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n >= 1)
        .ok_or(LockError::NumkeysInvalid)?;
    if numkeys > max_keys {
        return Err(LockError::NumkeysTooMany);
    }
    let end = 2 + numkeys;
    if end + after > args.len() {
        return Err(LockError::NumkeysMismatch);
    }
    let mut keys: Vec<&[u8]> = args[2..end].iter().map(ArgBytes::bytes).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(LockError::KeysDuplicate);
    }
    Ok(2..end)
}

/// `max_keys` is `lock.max-keys`, `max_ttl_ms` `lock.max-ttl-ms`.
pub fn parse_macquire<A: ArgBytes>(
    args: &[A],
    max_keys: usize,
    max_ttl_ms: i64,
) -> Result<MAcquireArgs<'_>, LockError> {
    let keys = parse_keys(args, max_keys, 1, LockError::ArityMAcquire)?;
    let ttl_ms = parse_ttl(args[keys.end].bytes())?;
    let options = parse_options(&args[keys.end + 1..], true, None)?;
    Ok(MAcquireArgs {
        keys,
        lock: AcquireArgs {
            ttl_ms: rules::check_ttl_limit(ttl_ms, max_ttl_ms)?,
            token: options.token,
            wait_ms: options.wait_ms,
            session: options.session,
            owner: options.owner,
            shared: options.shared,
            sync: options.sync,
            lease: options.lease,
        },
    })
}

/// `LOCK.MRELEASE`: exactly `numkeys` keys, then the token.
pub fn parse_mrelease<A: ArgBytes>(
    args: &[A],
    max_keys: usize,
) -> Result<MReleaseArgs<'_>, LockError> {
    let keys = parse_keys(args, max_keys, 1, LockError::ArityMRelease)?;
    if args.len() != keys.end + 1 {
        return Err(LockError::NumkeysMismatch);
    }
    Ok(MReleaseArgs {
        token: rules::check_token(args[keys.end].bytes())?,
        keys,
    })
}

/// `LOCK.MEXTEND`: exactly `numkeys` keys, then what `LOCK.EXTEND` takes
/// after its key.
pub fn parse_mextend<A: ArgBytes>(
    args: &[A],
    max_keys: usize,
    max_ttl_ms: i64,
) -> Result<MExtendArgs<'_>, LockError> {
    let keys = parse_keys(args, max_keys, 2, LockError::ArityMExtend)?;
    // `LOCK.EXTEND key token ttl-ms [SYNC …]`, its name and key being the
    // last two arguments before the token: a
    // word after ttl-ms other than SYNC is one too many, so numkeys lied.
    let extend = parse_extend_as(
        &args[keys.end - 2..],
        max_ttl_ms,
        LockError::NumkeysMismatch,
    )?;
    Ok(MExtendArgs { keys, extend })
}

/// `max_ttl_ms` is `lock.max-ttl-ms`.
pub fn parse_sem_acquire<A: ArgBytes>(
    args: &[A],
    max_ttl_ms: i64,
) -> Result<SemAcquireArgs<'_>, LockError> {
    if args.len() < 4 {
        return Err(LockError::AritySemAcquire);
    }
    let limit = parse_i64(args[2].bytes())
        .and_then(|l| u32::try_from(l).ok())
        .filter(|l| (1..=MAX_PERMITS).contains(l))
        .ok_or(LockError::LimitInvalid)?;
    let ttl_ms = parse_ttl(args[3].bytes())?;
    let options = parse_options(&args[4..], false, Some(limit))?;
    Ok(SemAcquireArgs {
        limit,
        count: options.count.unwrap_or(1),
        lock: AcquireArgs {
            ttl_ms: rules::check_ttl_limit(ttl_ms, max_ttl_ms)?,
            token: options.token,
            wait_ms: options.wait_ms,
            session: options.session,
            owner: options.owner,
            shared: false,
            sync: options.sync,
            lease: options.lease,
        },
    })
}

pub fn parse_extend<A: ArgBytes>(args: &[A], max_ttl_ms: i64) -> Result<ExtendArgs<'_>, LockError> {
    parse_extend_as(args, max_ttl_ms, LockError::ArityExtend)
}

/// `LOCK.EXTEND`'s arguments, for a command whose arity error is `arity`
/// (`SEM.EXTEND` takes the same).
pub fn parse_extend_as<A: ArgBytes>(
    args: &[A],
    max_ttl_ms: i64,
    arity: LockError,
) -> Result<ExtendArgs<'_>, LockError> {
    if args.len() < 4 {
        return Err(arity);
    }
    let token = rules::check_token(args[2].bytes())?;
    let ttl_ms = parse_ttl(args[3].bytes())?;
    let mut rest = args[4..].iter();
    let sync = match rest.next() {
        None => None,
        Some(word) if word.bytes().eq_ignore_ascii_case(b"SYNC") => {
            let sync = parse_sync(&mut rest)?;
            match rest.next() {
                None => sync,
                Some(word) if word.bytes().eq_ignore_ascii_case(b"AOF") => {
                    return Err(LockError::SyncAofUnsupported)
                }
                Some(_) => return Err(arity),
            }
        }
        // Anything else: one argument too many, as before options existed.
        Some(_) => return Err(arity),
    };
    Ok(ExtendArgs {
        token,
        ttl_ms: rules::check_ttl_limit(ttl_ms, max_ttl_ms)?,
        sync,
    })
}

pub fn parse_release<A: ArgBytes>(args: &[A]) -> Result<ReleaseArgs<'_>, LockError> {
    parse_release_as(args, LockError::ArityRelease)
}

/// `LOCK.RELEASE`'s arguments, for a command whose arity error is `arity`.
pub fn parse_release_as<A: ArgBytes>(
    args: &[A],
    arity: LockError,
) -> Result<ReleaseArgs<'_>, LockError> {
    if args.len() != 3 {
        return Err(arity);
    }
    Ok(ReleaseArgs {
        token: rules::check_token(args[2].bytes())?,
    })
}

pub fn parse_info<A: ArgBytes>(args: &[A]) -> Result<InfoArgs, LockError> {
    parse_info_as(args, LockError::ArityInfo)
}

/// `LOCK.INFO key [HOLDS n]` (and `SEM.INFO`)
#[derive(Debug, PartialEq, Eq)]
pub struct InfoArgs {
    /// `HOLDS n`: list the key's holds too, at most `n` of them.
    pub holds: Option<usize>,
}

/// `LOCK.INFO`'s arguments, for a command whose arity error is `arity`.
pub fn parse_info_as<A: ArgBytes>(args: &[A], arity: LockError) -> Result<InfoArgs, LockError> {
    parse_listing(args, b"HOLDS", LockError::HoldsInvalid, arity).map(|holds| InfoArgs { holds })
}

/// `key [<keyword> n]`: how many entries a listing shows, from 1 to
/// [`MAX_QUEUE_COUNT`]; `None` without the option.
fn parse_listing<A: ArgBytes>(
    args: &[A],
    keyword: &[u8],
    invalid: LockError,
    arity: LockError,
) -> Result<Option<usize>, LockError> {
    match args.len() {
        2 => Ok(None),
        4 if args[2].bytes().eq_ignore_ascii_case(keyword) => parse_i64(args[3].bytes())
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_QUEUE_COUNT).contains(n))
            .map(Some)
            .ok_or(invalid),
        3 | 4 => Err(LockError::SyntaxUnknownOption),
        _ => Err(arity),
    }
}

/// A holder's `limit` (0: a shared lock) and `count`, as a master sends them.
fn check_permits(limit: u32, count: u32) -> Result<(), LockError> {
    if limit > MAX_PERMITS {
        return Err(LockError::LimitInvalid);
    }
    if count < 1
        || if limit == 0 {
            count != 1
        } else {
            count > limit
        }
    {
        return Err(LockError::PermitCountInvalid);
    }
    Ok(())
}

/// `LOCK.SETHOLDER key limit count token fence deadline-ms granted-ms
/// extends [OWNER label]`.
pub fn parse_setholder<A: ArgBytes>(args: &[A]) -> Result<SetHolderArgs<'_>, LockError> {
    if args.len() == 4 {
        // `LOCK.SETHOLDER key token state`, the packed form (`effect.rs`).
        let token = rules::check_token(args[2].bytes())?;
        let (permits, state) = effect::unpack(args[3].bytes(), true)?;
        let Permits { limit, count } = permits.ok_or(LockError::StateInvalid)?;
        check_permits(limit, count)?;
        if state.deadline_ms < 0 {
            return Err(LockError::DeadlineInvalid);
        }
        return Ok(SetHolderArgs {
            limit,
            count,
            token,
            fence: state.fence,
            deadline_ms: state.deadline_ms,
            granted_ms: state.granted_ms,
            extends: state.extends,
            owner: state.owner,
            lease: state.lease,
        });
    }
    if !matches!(args.len(), 9 | 11 | 13) {
        return Err(LockError::ArityShared);
    }
    let number = |i: usize, error: LockError| parse_i64(args[i].bytes()).ok_or(error);
    let limit =
        u32::try_from(number(2, LockError::LimitInvalid)?).map_err(|_| LockError::LimitInvalid)?;
    let count = u32::try_from(number(3, LockError::PermitCountInvalid)?)
        .map_err(|_| LockError::PermitCountInvalid)?;
    check_permits(limit, count)?;
    let token = rules::check_token(args[4].bytes())?;
    let fence = u64::try_from(number(5, LockError::FenceInvalid)?)
        .map_err(|_| LockError::FenceInvalid)
        .and_then(rules::check_fence)?;
    let deadline_ms = number(6, LockError::DeadlineInvalid)?;
    if deadline_ms < 0 {
        return Err(LockError::DeadlineInvalid);
    }
    let granted_ms = number(7, LockError::GrantedInvalid)?;
    if granted_ms < 0 {
        return Err(LockError::GrantedInvalid);
    }
    let extends = u32::try_from(number(8, LockError::ExtendsInvalid)?)
        .map_err(|_| LockError::ExtendsInvalid)?;
    let (owner, lease) = parse_effect_tags(&args[9..])?;
    Ok(SetHolderArgs {
        limit,
        count,
        token,
        fence,
        deadline_ms,
        granted_ms,
        extends,
        owner,
        lease,
    })
}

pub fn parse_setstate<A: ArgBytes>(args: &[A]) -> Result<SetStateArgs<'_>, LockError> {
    if args.len() == 4 {
        // `LOCK.SETSTATE key token state`, the packed form (`effect.rs`).
        let token = rules::check_token(args[2].bytes())?;
        let (_, state) = effect::unpack(args[3].bytes(), false)?;
        return Ok(SetStateArgs {
            token,
            fence: state.fence,
            deadline_ms: (state.deadline_ms >= 0).then_some(state.deadline_ms),
            granted_ms: Some(state.granted_ms),
            extends: state.extends,
            owner: state.owner,
            lease: state.lease,
        });
    }
    if !matches!(args.len(), 5..=7 | 9 | 11) {
        return Err(LockError::AritySetState);
    }
    let (owner, lease) = parse_effect_tags(args.get(7..).unwrap_or_default())?;
    let token = rules::check_token(args[2].bytes())?;
    let fence = parse_i64(args[3].bytes())
        .and_then(|f| u64::try_from(f).ok())
        .ok_or(LockError::FenceInvalid)
        .and_then(rules::check_fence)?;
    let deadline_ms = match parse_i64(args[4].bytes()) {
        Some(-1) => None,
        Some(d) if d >= 0 => Some(d),
        _ => return Err(LockError::DeadlineInvalid),
    };
    let granted_ms = match args.get(5) {
        Some(granted) => Some(
            parse_i64(granted.bytes())
                .filter(|g| *g >= 0)
                .ok_or(LockError::GrantedInvalid)?,
        ),
        None => None,
    };
    let extends = match args.get(6) {
        Some(extends) => parse_i64(extends.bytes())
            .and_then(|e| u32::try_from(e).ok())
            .ok_or(LockError::ExtendsInvalid)?,
        None => 0,
    };
    Ok(SetStateArgs {
        token,
        fence,
        deadline_ms,
        granted_ms,
        extends,
        owner,
        lease,
    })
}

/// The options after an effect's text form: `[OWNER label] [LEASE number]`,
/// each at most once, in any order.
fn parse_effect_tags<A: ArgBytes>(rest: &[A]) -> Result<(Option<&[u8]>, Option<u64>), LockError> {
    let (mut owner, mut lease) = (None, None);
    for pair in rest.chunks(2) {
        match pair {
            [keyword, label]
                if keyword.bytes().eq_ignore_ascii_case(b"OWNER") && owner.is_none() =>
            {
                owner = Some(rules::check_owner(label.bytes())?);
            }
            [keyword, number]
                if keyword.bytes().eq_ignore_ascii_case(b"LEASE") && lease.is_none() =>
            {
                lease = Some(parse_lease_number(number.bytes())?);
            }
            _ => return Err(LockError::SyntaxUnknownOption),
        }
    }
    Ok((owner, lease))
}

/// A lease group's number (the public one, never its id): 1 or more.
fn parse_lease_number(text: &[u8]) -> Result<u64, LockError> {
    parse_i64(text)
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| *n >= 1)
        .ok_or(LockError::LeaseNumberInvalid)
}

/// `LOCK.LEASESET id number ttl-ms deadline-ms [OWNER label]`: a lease
/// group's whole state, as a master replicates it.
#[derive(Debug, PartialEq, Eq)]
pub struct LeaseSetArgs<'a> {
    pub id: LeaseId,
    pub number: u64,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
    pub owner: Option<&'a [u8]>,
}

pub fn parse_leaseset<A: ArgBytes>(args: &[A]) -> Result<LeaseSetArgs<'_>, LockError> {
    let (id, number, ttl, deadline, rest) = match args {
        [_, id, number, ttl, deadline, rest @ ..] if rest.len() <= 2 => {
            (id, number, ttl, deadline, rest)
        }
        _ => return Err(LockError::ArityLeaseSet),
    };
    let (owner, lease) = parse_effect_tags(rest)?;
    if lease.is_some() {
        return Err(LockError::SyntaxUnknownOption);
    }
    Ok(LeaseSetArgs {
        id: LeaseId::parse(id.bytes()).ok_or(LockError::LeaseIdInvalid)?,
        number: parse_lease_number(number.bytes())?,
        ttl_ms: parse_ttl(ttl.bytes())?,
        deadline_ms: parse_i64(deadline.bytes())
            .filter(|d| *d >= 0)
            .ok_or(LockError::DeadlineInvalid)?,
        owner,
    })
}

/// `LOCK.LEASEDEL id`: the lease group is gone.
pub fn parse_leasedel<A: ArgBytes>(args: &[A]) -> Result<LeaseId, LockError> {
    match args {
        [_, id] => LeaseId::parse(id.bytes()).ok_or(LockError::LeaseIdInvalid),
        _ => Err(LockError::ArityLeaseSet),
    }
}

pub fn parse_queue<A: ArgBytes>(args: &[A]) -> Result<QueueArgs, LockError> {
    parse_listing(
        args,
        b"COUNT",
        LockError::CountInvalid,
        LockError::ArityQueue,
    )
    .map(|count| QueueArgs {
        count: count.unwrap_or(10),
    })
}

pub fn parse_observe<A: ArgBytes>(args: &[A]) -> Result<ObserveArgs, LockError> {
    if args.len() != 4 {
        return Err(LockError::ArityObserve);
    }
    let fence = parse_i64(args[2].bytes())
        .and_then(|f| u64::try_from(f).ok())
        .filter(|&f| f <= rules::MAX_FENCE)
        .ok_or(LockError::ObservedFenceInvalid)?;
    let timeout_ms = parse_i64(args[3].bytes()).ok_or(LockError::WaitNotInteger)?;
    Ok(ObserveArgs {
        fence,
        timeout_ms: rules::check_wait(timeout_ms)?,
    })
}

#[inline]
fn parse_ttl(bytes: &[u8]) -> Result<i64, LockError> {
    rules::check_ttl(parse_i64(bytes).ok_or(LockError::TtlNotInteger)?)
}

/// A decimal integer as Redis reads one (`string2ll`): an optional `-`, then
/// digits with no leading zero, no `+`, no spaces, no fraction, within i64.
#[inline]
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    // Eighteen digits or fewer cannot overflow: no checked arithmetic for
    // the numbers every request carries (a TTL, a timeout).
    if digits.len() <= 18 {
        let mut value: i64 = 0;
        for &b in digits {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            value = value * 10 + i64::from(digit);
        }
        return Some(if negative { -value } else { value });
    }
    let mut value: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(b - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{DEFAULT_MAX_TTL_MS, MAX_FENCE};

    const MAX: i64 = DEFAULT_MAX_TTL_MS;

    #[test]
    fn integers_are_read_as_redis_reads_them() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"30000"), Some(30000));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"+5",
            b"05",
            b" 5",
            b"5 ",
            b"1.5",
            b"1e3",
            b"abc",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"\xff",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn acquire_with_and_without_token() {
        let a = parse_acquire(&["LOCK.ACQUIRE", "k", "30000"], MAX).unwrap();
        assert_eq!(
            a,
            AcquireArgs {
                ttl_ms: 30000,
                token: None,
                wait_ms: None,
                session: false,
                owner: None,
                shared: false,
                sync: None,
                lease: None,
            }
        );
        let a = parse_acquire(&["LOCK.ACQUIRE", "k", "5", "session", "WAIT", "0"], MAX).unwrap();
        assert_eq!((a.session, a.wait_ms), (true, Some(0)));
        let a =
            parse_acquire(&["LOCK.ACQUIRE", "k", "5", "wait", "0", "TOKEN", "me"], MAX).unwrap();
        assert_eq!((a.token, a.wait_ms), (Some(&b"me"[..]), Some(0)));
        let a = parse_acquire(&["LOCK.ACQUIRE", "k", "5", "WAIT", "2500"], MAX).unwrap();
        assert_eq!(a.wait_ms, Some(2500));
        let a = parse_acquire(&["LOCK.ACQUIRE", "k", "5", "token", "me"], MAX).unwrap();
        assert_eq!(a.token, Some(&b"me"[..]));
        let binary: [&[u8]; 5] = [b"LOCK.ACQUIRE", b"k", b"5", b"TOKEN", b"\x00\xff\r\n"];
        assert_eq!(
            parse_acquire(&binary, MAX).unwrap().token,
            Some(&b"\x00\xff\r\n"[..])
        );
    }

    #[test]
    fn acquire_garbage_is_refused_with_the_right_error() {
        let long = "x".repeat(257);
        let cases: Vec<(Vec<&str>, LockError)> = vec![
            (vec!["LOCK.ACQUIRE"], LockError::ArityAcquire),
            (vec!["LOCK.ACQUIRE", "k"], LockError::ArityAcquire),
            (vec!["LOCK.ACQUIRE", "k", "abc"], LockError::TtlNotInteger),
            (vec!["LOCK.ACQUIRE", "k", "1.5"], LockError::TtlNotInteger),
            (vec!["LOCK.ACQUIRE", "k", ""], LockError::TtlNotInteger),
            (
                vec!["LOCK.ACQUIRE", "k", "99999999999999999999"],
                LockError::TtlNotInteger,
            ),
            (vec!["LOCK.ACQUIRE", "k", "0"], LockError::TtlNotPositive),
            (vec!["LOCK.ACQUIRE", "k", "-1"], LockError::TtlNotPositive),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "SESSION", "SESSION"],
                LockError::SyntaxRepeatedSession,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "TOKEN"],
                LockError::SyntaxMissingToken,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "TOKEN", ""],
                LockError::TokenLength,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "TOKEN", &long],
                LockError::TokenLength,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "TOKEN", "a", "TOKEN", "a"],
                LockError::SyntaxRepeatedToken,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "NX"],
                LockError::SyntaxUnknownOption,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "TOKEN", "a", "extra"],
                LockError::SyntaxUnknownOption,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "WAIT"],
                LockError::SyntaxMissingWait,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "WAIT", "1", "WAIT", "1"],
                LockError::SyntaxRepeatedWait,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "WAIT", "-1"],
                LockError::WaitNegative,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "WAIT", "1.5"],
                LockError::WaitNotInteger,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "WAIT", "soon"],
                LockError::WaitNotInteger,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "WAIT", ""],
                LockError::WaitNotInteger,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "WAIT", "99999999999999999999"],
                LockError::WaitNotInteger,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "WAIT", "9223372036854775807"],
                LockError::WaitTooLarge,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "10", "WAIT", "31536000001"],
                LockError::WaitTooLarge,
            ),
        ];
        for (args, want) in cases {
            assert_eq!(parse_acquire(&args, MAX), Err(want), "{args:?}");
        }
    }

    #[test]
    fn sync_takes_replicas_and_a_timeout_on_every_command_that_grants_or_renews() {
        let sync = |replicas, timeout_ms| {
            Some(Sync {
                replicas,
                timeout_ms,
            })
        };
        let a = parse_acquire(
            &["LOCK.ACQUIRE", "k", "5", "SYNC", "1", "200", "WAIT", "0"],
            MAX,
        );
        assert_eq!(a.map(|a| a.sync), Ok(sync(1, 200)));
        let a = parse_acquire(&["LOCK.ACQUIRE", "k", "5", "sync", "0", "200"], MAX);
        assert_eq!(a.map(|a| a.sync), Ok(None), "SYNC 0 is no SYNC");
        let s = parse_sem_acquire(&["SEM.ACQUIRE", "s", "3", "5", "SYNC", "2", "10"], MAX);
        assert_eq!(s.map(|s| s.lock.sync), Ok(sync(2, 10)));
        let e = parse_extend(
            &["LOCK.EXTEND", "k", "t", "5", "SYNC", "1000", "31536000000"],
            MAX,
        );
        assert_eq!(e.map(|e| e.sync), Ok(sync(1000, 31_536_000_000)));
        for (args, want) in [
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC"],
                LockError::SyntaxMissingSync,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC", "1"],
                LockError::SyntaxMissingSync,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC", "-1", "5"],
                LockError::SyncReplicasInvalid,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC", "1001", "5"],
                LockError::SyncReplicasInvalid,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC", "x", "5"],
                LockError::SyncReplicasInvalid,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC", "1", "0"],
                LockError::SyncTimeoutInvalid,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC", "1", "-5"],
                LockError::SyncTimeoutInvalid,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC", "1", "31536000001"],
                LockError::SyncTimeoutInvalid,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC", "1", "5", "SYNC", "1", "5"],
                LockError::SyntaxRepeatedSync,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "SYNC", "1", "5", "AOF"],
                LockError::SyncAofUnsupported,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "AOF"],
                LockError::SyntaxUnknownOption,
            ),
        ] {
            assert_eq!(parse_acquire(&args, MAX).map(|_| ()), Err(want), "{args:?}");
        }
        for (args, want) in [
            (
                vec!["LOCK.EXTEND", "k", "t", "5", "SYNC", "1"],
                LockError::SyntaxMissingSync,
            ),
            (
                vec!["LOCK.EXTEND", "k", "t", "5", "SYNC", "1", "5", "AOF"],
                LockError::SyncAofUnsupported,
            ),
            (
                vec!["LOCK.EXTEND", "k", "t", "5", "SYNC", "1", "5", "x"],
                LockError::ArityExtend,
            ),
            (
                vec!["LOCK.EXTEND", "k", "t", "5", "WAIT", "1", "5"],
                LockError::ArityExtend,
            ),
        ] {
            assert_eq!(parse_extend(&args, MAX).map(|_| ()), Err(want), "{args:?}");
        }
    }

    #[test]
    fn lease_groups_their_ids_and_revocation_reasons() {
        let id = "0123456789abcdef0123456789abcdef";
        let args = ["LOCK.ACQUIRE", "k", "5", "LEASE", id];
        let a = parse_acquire(&args, MAX).unwrap();
        assert_eq!(a.lease, LeaseId::parse(id.as_bytes()));
        for (args, want) in [
            (
                vec!["LOCK.ACQUIRE", "k", "5", "LEASE"],
                LockError::SyntaxMissingLease,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "LEASE", "x"],
                LockError::LeaseIdInvalid,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "LEASE", id, "lease", id],
                LockError::SyntaxRepeatedLease,
            ),
        ] {
            assert_eq!(parse_acquire(&args, MAX).map(|_| ()), Err(want), "{args:?}");
        }
        assert_eq!(
            parse_lease_grant(&["LOCK.LEASE", "GRANT", "1000", "owner", "pod"], MAX),
            Ok(LeaseGrantArgs {
                ttl_ms: 1000,
                owner: Some(b"pod")
            })
        );
        for (args, want) in [
            (vec!["LOCK.LEASE", "GRANT"], LockError::ArityLease),
            (vec!["LOCK.LEASE", "GRANT", "0"], LockError::TtlNotPositive),
            (vec!["LOCK.LEASE", "GRANT", "x"], LockError::TtlNotInteger),
            (
                vec!["LOCK.LEASE", "GRANT", "1", "OWNER"],
                LockError::SyntaxMissingOwner,
            ),
            (
                vec!["LOCK.LEASE", "GRANT", "1", "WHO", "x"],
                LockError::SyntaxUnknownOption,
            ),
            (
                vec!["LOCK.LEASE", "GRANT", "1", "OWNER", "a", "owner", "b"],
                LockError::SyntaxRepeatedOwner,
            ),
            (
                vec!["LOCK.LEASE", "GRANT", "1", "OWNER", "a", "OWNER"],
                LockError::SyntaxMissingOwner,
            ),
            (
                vec!["LOCK.LEASE", "GRANT", "1", "OWNER", "a", "x"],
                LockError::SyntaxUnknownOption,
            ),
            (
                vec!["LOCK.LEASE", "GRANT", "1", "OWNER", ""],
                LockError::OwnerLength,
            ),
            (
                vec!["LOCK.LEASE", "GRANT", "86400001"],
                LockError::TtlTooLarge,
            ),
        ] {
            assert_eq!(
                parse_lease_grant(&args, MAX).map(|_| ()),
                Err(want),
                "{args:?}"
            );
        }
        assert!(parse_lease_id(&["LOCK.LEASE", "KEEPALIVE", id]).is_ok());
        assert!(parse_lease_id(&["LOCK.LEASE", "END", id]).is_ok());
        assert_eq!(parse_lease_help(&["LOCK.LEASE", "HELP"]), Ok(()));
        assert_eq!(
            parse_lease_help(&["LOCK.LEASE", "HELP", "x"]),
            Err(LockError::ArityLease)
        );
        assert_eq!(
            parse_lease_id(&["LOCK.LEASE", "KEEPALIVE", "ABC"]),
            Err(LockError::LeaseIdInvalid)
        );
        assert_eq!(
            parse_lease_id(&["LOCK.LEASE", "KEEPALIVE"]),
            Err(LockError::ArityLease)
        );
        assert_eq!(parse_revoke(&["LOCK.REVOKE", "k"]), Ok(None));
        assert_eq!(
            parse_revoke(&["LOCK.REVOKE", "k", "reason", "stuck"]),
            Ok(Some(&b"stuck"[..]))
        );
        let long = "x".repeat(129);
        for (args, want) in [
            (vec!["LOCK.REVOKE"], LockError::ArityRevoke),
            (
                vec!["LOCK.REVOKE", "k", "REASON"],
                LockError::SyntaxMissingReason,
            ),
            (
                vec!["LOCK.REVOKE", "k", "REASON", "a", "reason", "b"],
                LockError::SyntaxRepeatedReason,
            ),
            (
                vec!["LOCK.REVOKE", "k", "REASON", "a", "REASON"],
                LockError::SyntaxMissingReason,
            ),
            (
                vec!["LOCK.REVOKE", "k", "WHY", "x"],
                LockError::SyntaxUnknownOption,
            ),
            (
                vec!["LOCK.REVOKE", "k", "REASON", ""],
                LockError::ReasonLength,
            ),
            (
                vec!["LOCK.REVOKE", "k", "REASON", &long],
                LockError::ReasonLength,
            ),
            (
                vec!["LOCK.REVOKE", "k", "REASON", "x", "y"],
                LockError::SyntaxUnknownOption,
            ),
        ] {
            assert_eq!(parse_revoke(&args), Err(want), "{args:?}");
        }
    }

    #[test]
    fn effects_carry_a_lease_number_and_leases_their_whole_state() {
        let text = [
            "LOCK.SETSTATE",
            "k",
            "t",
            "7",
            "100",
            "50",
            "0",
            "LEASE",
            "9",
            "OWNER",
            "o",
        ];
        let parsed = parse_setstate(&text).unwrap();
        assert_eq!((parsed.lease, parsed.owner), (Some(9), Some(&b"o"[..])));
        let holder = [
            "LOCK.SETHOLDER",
            "k",
            "0",
            "1",
            "t",
            "7",
            "100",
            "50",
            "0",
            "LEASE",
            "9",
        ];
        assert_eq!(parse_setholder(&holder).map(|h| h.lease), Ok(Some(9)));
        for (args, want) in [
            (
                vec![
                    "LOCK.SETSTATE",
                    "k",
                    "t",
                    "7",
                    "100",
                    "50",
                    "0",
                    "LEASE",
                    "0",
                ],
                LockError::LeaseNumberInvalid,
            ),
            (
                vec![
                    "LOCK.SETSTATE",
                    "k",
                    "t",
                    "7",
                    "100",
                    "50",
                    "0",
                    "LEASE",
                    "x",
                ],
                LockError::LeaseNumberInvalid,
            ),
            (
                vec![
                    "LOCK.SETSTATE",
                    "k",
                    "t",
                    "7",
                    "100",
                    "50",
                    "0",
                    "LEASE",
                    "1",
                    "LEASE",
                    "2",
                ],
                LockError::SyntaxUnknownOption,
            ),
            (
                vec![
                    "LOCK.SETSTATE",
                    "k",
                    "t",
                    "7",
                    "100",
                    "50",
                    "0",
                    "WHAT",
                    "1",
                ],
                LockError::SyntaxUnknownOption,
            ),
        ] {
            assert_eq!(parse_setstate(&args).map(|_| ()), Err(want), "{args:?}");
        }
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            parse_leaseset(&[
                "LOCK.LEASESET",
                id,
                "9",
                "1000",
                "1700000000000",
                "OWNER",
                "pod"
            ]),
            Ok(LeaseSetArgs {
                id: LeaseId::parse(id.as_bytes()).unwrap(),
                number: 9,
                ttl_ms: 1000,
                deadline_ms: 1_700_000_000_000,
                owner: Some(b"pod"),
            })
        );
        for (args, want) in [
            (
                vec!["LOCK.LEASESET", id, "9", "1000"],
                LockError::ArityLeaseSet,
            ),
            (
                vec!["LOCK.LEASESET", "x", "9", "1000", "1"],
                LockError::LeaseIdInvalid,
            ),
            (
                vec!["LOCK.LEASESET", id, "0", "1000", "1"],
                LockError::LeaseNumberInvalid,
            ),
            (
                vec!["LOCK.LEASESET", id, "9", "0", "1"],
                LockError::TtlNotPositive,
            ),
            (
                vec!["LOCK.LEASESET", id, "9", "1000", "-1"],
                LockError::DeadlineInvalid,
            ),
            (
                vec!["LOCK.LEASESET", id, "9", "1000", "1", "LEASE", "2"],
                LockError::SyntaxUnknownOption,
            ),
        ] {
            assert_eq!(parse_leaseset(&args).map(|_| ()), Err(want), "{args:?}");
        }
        assert!(parse_leasedel(&["LOCK.LEASEDEL", id]).is_ok());
        assert_eq!(
            parse_leasedel(&["LOCK.LEASEDEL"]),
            Err(LockError::ArityLeaseSet)
        );
    }

    #[test]
    fn extend_release_info_arity_and_values() {
        assert_eq!(
            parse_extend(&["LOCK.EXTEND", "k", "t", "100"], MAX),
            Ok(ExtendArgs {
                token: b"t",
                ttl_ms: 100,
                sync: None,
            })
        );
        assert_eq!(
            parse_extend(&["LOCK.EXTEND", "k", "t"], MAX),
            Err(LockError::ArityExtend)
        );
        assert_eq!(
            parse_extend(&["LOCK.EXTEND", "k", "t", "1", "x"], MAX),
            Err(LockError::ArityExtend)
        );
        assert_eq!(
            parse_extend(&["LOCK.EXTEND", "k", "", "1"], MAX),
            Err(LockError::TokenLength)
        );
        assert_eq!(
            parse_extend(&["LOCK.EXTEND", "k", "t", "x"], MAX),
            Err(LockError::TtlNotInteger)
        );
        assert_eq!(
            parse_extend(&["LOCK.EXTEND", "k", "t", "0"], MAX),
            Err(LockError::TtlNotPositive)
        );
        // The configured maximum (lock.max-ttl-ms) is passed in, and checked
        // after the syntax.
        assert_eq!(
            parse_extend(&["LOCK.EXTEND", "k", "t", "9223372036854775807"], i64::MAX),
            Ok(ExtendArgs {
                token: b"t",
                ttl_ms: i64::MAX,
                sync: None,
            })
        );
        assert_eq!(
            parse_extend(&["LOCK.EXTEND", "k", "t", "1001"], 1000),
            Err(LockError::TtlTooLarge)
        );
        assert_eq!(
            parse_extend(&["LOCK.EXTEND", "k", "", "1001"], 1000),
            Err(LockError::TokenLength)
        );
        assert_eq!(
            parse_acquire(&["LOCK.ACQUIRE", "k", "1001"], 1000),
            Err(LockError::TtlTooLarge)
        );
        assert_eq!(
            parse_acquire(&["LOCK.ACQUIRE", "k", "1001", "TOKEN"], 1000),
            Err(LockError::SyntaxMissingToken)
        );

        assert_eq!(
            parse_release(&["LOCK.RELEASE", "k", "t"]),
            Ok(ReleaseArgs { token: b"t" })
        );
        assert_eq!(
            parse_release(&["LOCK.RELEASE", "k"]),
            Err(LockError::ArityRelease)
        );
        assert_eq!(
            parse_release(&["LOCK.RELEASE", "k", "t", "u"]),
            Err(LockError::ArityRelease)
        );
        assert_eq!(
            parse_release(&["LOCK.RELEASE", "k", ""]),
            Err(LockError::TokenLength)
        );

        assert_eq!(
            parse_info(&["LOCK.INFO", "k"]),
            Ok(InfoArgs { holds: None })
        );
        assert_eq!(
            parse_info(&["LOCK.INFO", "k", "holds", "3"]),
            Ok(InfoArgs { holds: Some(3) })
        );
        assert_eq!(parse_info(&["LOCK.INFO"]), Err(LockError::ArityInfo));
        for (args, want) in [
            (&["LOCK.INFO", "k", "j"][..], LockError::SyntaxUnknownOption),
            (&["LOCK.INFO", "k", "HOLDS"], LockError::SyntaxUnknownOption),
            (
                &["LOCK.INFO", "k", "COUNT", "3"],
                LockError::SyntaxUnknownOption,
            ),
            (&["LOCK.INFO", "k", "HOLDS", "0"], LockError::HoldsInvalid),
            (
                &["LOCK.INFO", "k", "HOLDS", "1001"],
                LockError::HoldsInvalid,
            ),
            (&["LOCK.INFO", "k", "HOLDS", "x\0"], LockError::HoldsInvalid),
            (&["LOCK.INFO", "k", "HOLDS", "1", "x"], LockError::ArityInfo),
        ] {
            assert_eq!(parse_info(args), Err(want), "{args:?}");
        }
    }

    #[test]
    fn owner_labels_queue_and_observe() {
        let a = parse_acquire(
            &["LOCK.ACQUIRE", "k", "5", "owner", "pod-7", "WAIT", "0"],
            MAX,
        )
        .unwrap();
        assert_eq!((a.owner, a.wait_ms), (Some(&b"pod-7"[..]), Some(0)));
        let long = "x".repeat(129);
        for (args, want) in [
            (
                vec!["LOCK.ACQUIRE", "k", "5", "OWNER"],
                LockError::SyntaxMissingOwner,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "OWNER", ""],
                LockError::OwnerLength,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "OWNER", &long],
                LockError::OwnerLength,
            ),
            (
                vec!["LOCK.ACQUIRE", "k", "5", "OWNER", "a", "OWNER", "b"],
                LockError::SyntaxRepeatedOwner,
            ),
        ] {
            assert_eq!(parse_acquire(&args, MAX), Err(want), "{args:?}");
        }
        let s = parse_setstate(&["LOCK.SETSTATE", "k", "t", "7", "1", "2", "0", "OWNER", "me"])
            .unwrap();
        assert_eq!((s.extends, s.owner), (0, Some(&b"me"[..])));
        assert_eq!(
            parse_setstate(&["LOCK.SETSTATE", "k", "t", "7", "1", "2", "0", "OWNED", "me"]),
            Err(LockError::SyntaxUnknownOption)
        );
        assert_eq!(
            parse_setstate(&["LOCK.SETSTATE", "k", "t", "7", "1", "2", "0", "OWNER", ""]),
            Err(LockError::OwnerLength)
        );

        assert_eq!(
            parse_queue(&["LOCK.QUEUE", "k"]),
            Ok(QueueArgs { count: 10 })
        );
        assert_eq!(
            parse_queue(&["LOCK.QUEUE", "k", "count", "1000"]),
            Ok(QueueArgs { count: 1000 })
        );
        for (args, want) in [
            (vec!["LOCK.QUEUE"], LockError::ArityQueue),
            (
                vec!["LOCK.QUEUE", "k", "COUNT"],
                LockError::SyntaxUnknownOption,
            ),
            (
                vec!["LOCK.QUEUE", "k", "LIMIT", "5"],
                LockError::SyntaxUnknownOption,
            ),
            (
                vec!["LOCK.QUEUE", "k", "COUNT", "0"],
                LockError::CountInvalid,
            ),
            (
                vec!["LOCK.QUEUE", "k", "COUNT", "1001"],
                LockError::CountInvalid,
            ),
            (
                vec!["LOCK.QUEUE", "k", "COUNT", "x"],
                LockError::CountInvalid,
            ),
            (
                vec!["LOCK.QUEUE", "k", "COUNT", "5", "x"],
                LockError::ArityQueue,
            ),
        ] {
            assert_eq!(parse_queue(&args), Err(want), "{args:?}");
        }

        assert_eq!(
            parse_observe(&["LOCK.OBSERVE", "k", "0", "30000"]),
            Ok(ObserveArgs {
                fence: 0,
                timeout_ms: 30_000
            })
        );
        let over = (MAX_FENCE + 1).to_string();
        for (args, want) in [
            (vec!["LOCK.OBSERVE", "k", "0"], LockError::ArityObserve),
            (
                vec!["LOCK.OBSERVE", "k", "-1", "10"],
                LockError::ObservedFenceInvalid,
            ),
            (
                vec!["LOCK.OBSERVE", "k", over.as_str(), "10"],
                LockError::ObservedFenceInvalid,
            ),
            (
                vec!["LOCK.OBSERVE", "k", "x", "10"],
                LockError::ObservedFenceInvalid,
            ),
            (
                vec!["LOCK.OBSERVE", "k", "5", "soon"],
                LockError::WaitNotInteger,
            ),
            (
                vec!["LOCK.OBSERVE", "k", "5", "-1"],
                LockError::WaitNegative,
            ),
            (
                vec!["LOCK.OBSERVE", "k", "5", "31536000001"],
                LockError::WaitTooLarge,
            ),
        ] {
            assert_eq!(parse_observe(&args), Err(want), "{args:?}");
        }
    }

    #[test]
    fn shared_and_semaphore_arguments() {
        let a = parse_acquire(&["LOCK.ACQUIRE", "k", "5", "shared", "WAIT", "0"], MAX).unwrap();
        assert!(a.shared);
        assert_eq!(
            parse_acquire(&["LOCK.ACQUIRE", "k", "5", "SHARED", "SHARED"], MAX),
            Err(LockError::SyntaxRepeatedShared)
        );
        assert_eq!(
            parse_acquire(&["LOCK.ACQUIRE", "k", "5", "COUNT", "2"], MAX),
            Err(LockError::SyntaxUnknownOption)
        );
        let s = parse_sem_acquire(
            &[
                "SEM.ACQUIRE",
                "k",
                "3",
                "5000",
                "count",
                "2",
                "TOKEN",
                "t",
                "WAIT",
                "10",
                "OWNER",
                "o",
            ],
            MAX,
        )
        .unwrap();
        assert_eq!((s.limit, s.count), (3, 2));
        assert_eq!(
            (s.lock.token, s.lock.wait_ms, s.lock.owner),
            (Some(&b"t"[..]), Some(10), Some(&b"o"[..]))
        );
        let one = parse_sem_acquire(&["SEM.ACQUIRE", "k", "3", "5000"], MAX).unwrap();
        assert_eq!(one.count, 1);
        for (args, want) in [
            (vec!["SEM.ACQUIRE", "k", "3"], LockError::AritySemAcquire),
            (vec!["SEM.ACQUIRE", "k", "0", "10"], LockError::LimitInvalid),
            (
                vec!["SEM.ACQUIRE", "k", "-1", "10"],
                LockError::LimitInvalid,
            ),
            (
                vec!["SEM.ACQUIRE", "k", "1000001", "10"],
                LockError::LimitInvalid,
            ),
            (vec!["SEM.ACQUIRE", "k", "x", "10"], LockError::LimitInvalid),
            (
                vec!["SEM.ACQUIRE", "k", "3", "0"],
                LockError::TtlNotPositive,
            ),
            (
                vec!["SEM.ACQUIRE", "k", "3", "10", "COUNT", "4"],
                LockError::PermitCountInvalid,
            ),
            (
                vec!["SEM.ACQUIRE", "k", "3", "10", "COUNT", "0"],
                LockError::PermitCountInvalid,
            ),
            (
                vec!["SEM.ACQUIRE", "k", "3", "10", "COUNT"],
                LockError::SyntaxMissingCount,
            ),
            (
                vec!["SEM.ACQUIRE", "k", "3", "10", "COUNT", "1", "COUNT", "1"],
                LockError::SyntaxRepeatedCount,
            ),
            (
                vec!["SEM.ACQUIRE", "k", "3", "10", "SHARED"],
                LockError::SyntaxUnknownOption,
            ),
            (
                vec!["SEM.ACQUIRE", "k", "3", "99999999999"],
                LockError::TtlTooLarge,
            ),
        ] {
            assert_eq!(parse_sem_acquire(&args, MAX), Err(want), "{args:?}");
        }
        let h = parse_setholder(&["LOCK.SETHOLDER", "k", "3", "2", "t", "7", "100", "50", "1"])
            .unwrap();
        assert_eq!(
            (
                h.limit,
                h.count,
                h.fence,
                h.deadline_ms,
                h.granted_ms,
                h.extends
            ),
            (3, 2, 7, 100, 50, 1)
        );
        let h = parse_setholder(&[
            "LOCK.SETHOLDER",
            "k",
            "0",
            "1",
            "t",
            "7",
            "100",
            "50",
            "0",
            "OWNER",
            "r",
        ])
        .unwrap();
        assert_eq!((h.limit, h.owner), (0, Some(&b"r"[..])));
        for (args, want) in [
            (
                vec!["LOCK.SETHOLDER", "k", "0", "2", "t", "7", "100", "50", "0"],
                LockError::PermitCountInvalid,
            ),
            (
                vec!["LOCK.SETHOLDER", "k", "3", "4", "t", "7", "100", "50", "0"],
                LockError::PermitCountInvalid,
            ),
            (
                vec!["LOCK.SETHOLDER", "k", "3", "1", "t", "0", "100", "50", "0"],
                LockError::FenceInvalid,
            ),
            (
                vec!["LOCK.SETHOLDER", "k", "3", "1", "t", "7", "-1", "50", "0"],
                LockError::DeadlineInvalid,
            ),
            (
                vec!["LOCK.SETHOLDER", "k", "3", "1", "t", "7", "100", "50"],
                LockError::ArityShared,
            ),
        ] {
            assert_eq!(parse_setholder(&args), Err(want), "{args:?}");
        }
    }

    #[test]
    fn guard_needs_a_key_a_token_and_a_command() {
        let plain = |command_at| GuardArgs {
            token: b"t",
            sync: None,
            command_at,
        };
        assert_eq!(
            parse_guard(&["LOCK.GUARD", "k", "t", "SET", "d", "v"]),
            Ok(plain(3))
        );
        assert_eq!(parse_guard(&["LOCK.GUARD", "k", "t", "PING"]), Ok(plain(3)));
        // Redis' own SYNC, alone: the guarded command (refused later).
        assert_eq!(parse_guard(&["LOCK.GUARD", "k", "t", "SYNC"]), Ok(plain(3)));
        assert_eq!(
            parse_guard(&["LOCK.GUARD", "k", "t", "sync", "1", "50", "SET", "d", "v"]),
            Ok(GuardArgs {
                token: b"t",
                sync: Some(Sync {
                    replicas: 1,
                    timeout_ms: 50
                }),
                command_at: 6,
            })
        );
        assert_eq!(
            parse_guard(&["LOCK.GUARD", "k", "t", "SYNC", "0", "50", "GET", "d"]),
            Ok(plain(6)),
            "SYNC 0 is no SYNC"
        );
        for (args, want) in [
            (
                vec!["LOCK.GUARD", "k", "t", "SYNC", "1", "50"],
                LockError::ArityGuard,
            ),
            (
                vec!["LOCK.GUARD", "k", "t", "SYNC", "1"],
                LockError::SyntaxMissingSync,
            ),
            (
                vec!["LOCK.GUARD", "k", "t", "SYNC", "x", "50", "GET", "d"],
                LockError::SyncReplicasInvalid,
            ),
            (
                vec!["LOCK.GUARD", "k", "t", "SYNC", "1", "0", "GET", "d"],
                LockError::SyncTimeoutInvalid,
            ),
        ] {
            assert_eq!(parse_guard(&args), Err(want), "{args:?}");
        }
        let long = "x".repeat(257);
        for (args, want) in [
            (vec!["LOCK.GUARD"], LockError::ArityGuard),
            (vec!["LOCK.GUARD", "k"], LockError::ArityGuard),
            (vec!["LOCK.GUARD", "k", "t"], LockError::ArityGuard),
            (
                vec!["LOCK.GUARD", "k", "", "GET", "d"],
                LockError::TokenLength,
            ),
            (
                vec!["LOCK.GUARD", "k", &long, "GET", "d"],
                LockError::TokenLength,
            ),
        ] {
            assert_eq!(parse_guard(&args), Err(want), "{args:?}");
        }
    }

    #[test]
    fn setstate_values() {
        let s = parse_setstate(&["LOCK.SETSTATE", "k", "t", "7", "1700000000000"]).unwrap();
        assert_eq!(
            s,
            SetStateArgs {
                token: b"t",
                fence: 7,
                deadline_ms: Some(1_700_000_000_000),
                granted_ms: None,
                extends: 0,
                owner: None,
                lease: None,
            }
        );
        let s = parse_setstate(&[
            "LOCK.SETSTATE",
            "k",
            "t",
            "7",
            "1700000000000",
            "1699999999000",
            "3",
        ])
        .unwrap();
        assert_eq!((s.granted_ms, s.extends), (Some(1_699_999_999_000), 3));
        for (granted, extends, want) in [
            ("-1", "0", LockError::GrantedInvalid),
            ("x", "0", LockError::GrantedInvalid),
            ("1", "-1", LockError::ExtendsInvalid),
            ("1", "4294967296", LockError::ExtendsInvalid),
            ("1", "many", LockError::ExtendsInvalid),
        ] {
            assert_eq!(
                parse_setstate(&["LOCK.SETSTATE", "k", "t", "7", "1", granted, extends]),
                Err(want)
            );
        }
        let grant = parse_setstate(&["LOCK.SETSTATE", "k", "t", "7", "1", "2"]).unwrap();
        assert_eq!((grant.granted_ms, grant.extends), (Some(2), 0));
        assert_eq!(
            parse_setstate(&["LOCK.SETSTATE", "k", "t", "7", "1", "2", "3", "4"]),
            Err(LockError::AritySetState)
        );
        let s = parse_setstate(&["LOCK.SETSTATE", "k", "t", "7", "-1"]).unwrap();
        assert_eq!(s.deadline_ms, None);
        let max = MAX_FENCE.to_string();
        let over = (MAX_FENCE + 1).to_string();
        assert!(parse_setstate(&["LOCK.SETSTATE", "k", "t", max.as_str(), "0"]).is_ok());
        for (fence, deadline, want) in [
            ("0", "1", LockError::FenceInvalid),
            ("-3", "1", LockError::FenceInvalid),
            ("x", "1", LockError::FenceInvalid),
            (over.as_str(), "1", LockError::FenceInvalid),
            ("1", "-2", LockError::DeadlineInvalid),
            ("1", "soon", LockError::DeadlineInvalid),
        ] {
            assert_eq!(
                parse_setstate(&["LOCK.SETSTATE", "k", "t", fence, deadline]),
                Err(want)
            );
        }
        assert_eq!(
            parse_setstate(&["LOCK.SETSTATE", "k", "t"]),
            Err(LockError::AritySetState)
        );
        // Four arguments: the packed form, whose state is 24 bytes or more.
        assert_eq!(
            parse_setstate(&["LOCK.SETSTATE", "k", "t", "1"]),
            Err(LockError::StateInvalid)
        );
    }

    #[test]
    fn the_packed_forms_carry_the_same_values_as_the_text_forms() {
        let state = effect::State {
            fence: 7,
            deadline_ms: 1_700_000_030_000,
            granted_ms: 1_700_000_000_000,
            extends: 2,
            owner: Some(b"pod-7"),
            lease: None,
        };
        let packed = effect::pack(None, &state);
        let args: [&[u8]; 4] = [b"LOCK.SETSTATE", b"k", b"t", packed.bytes()];
        let text = [
            "LOCK.SETSTATE",
            "k",
            "t",
            "7",
            "1700000030000",
            "1700000000000",
            "2",
            "OWNER",
            "pod-7",
        ];
        assert_eq!(parse_setstate(&args), parse_setstate(&text));
        let none = effect::pack(
            None,
            &effect::State {
                deadline_ms: -1,
                owner: None,
                ..state
            },
        );
        let args: [&[u8]; 4] = [b"LOCK.SETSTATE", b"k", b"t", none.bytes()];
        assert_eq!(parse_setstate(&args).map(|s| s.deadline_ms), Ok(None));
        let empty: [&[u8]; 4] = [b"LOCK.SETSTATE", b"k", b"", packed.bytes()];
        assert_eq!(parse_setstate(&empty), Err(LockError::TokenLength));

        let permits = Some(effect::Permits { limit: 3, count: 2 });
        let packed = effect::pack(permits, &state);
        let args: [&[u8]; 4] = [b"LOCK.SETHOLDER", b"k", b"t", packed.bytes()];
        let text = [
            "LOCK.SETHOLDER",
            "k",
            "3",
            "2",
            "t",
            "7",
            "1700000030000",
            "1700000000000",
            "2",
            "OWNER",
            "pod-7",
        ];
        assert_eq!(parse_setholder(&args), parse_setholder(&text));
        // The spelled-out effect (what tests and the chaos checker read) is
        // that text form, for a holder and for a lock.
        let spelled = effect::spell_out(&args).unwrap().unwrap();
        assert_eq!(spelled, text.map(|t| t.as_bytes().to_vec()));
        let lock = effect::pack(None, &state);
        let lock_args: [&[u8]; 4] = [b"LOCK.SETSTATE", b"k", b"t", lock.bytes()];
        let spelled = effect::spell_out(&lock_args).unwrap().unwrap();
        let spelled: Vec<&[u8]> = spelled.iter().map(Vec::as_slice).collect();
        assert_eq!(parse_setstate(&spelled), parse_setstate(&lock_args));
        for (limit, count, want) in [
            (3, 4, LockError::PermitCountInvalid),
            (0, 2, LockError::PermitCountInvalid),
            (3, 0, LockError::PermitCountInvalid),
            (MAX_PERMITS + 1, 1, LockError::LimitInvalid),
        ] {
            let bad = effect::pack(Some(effect::Permits { limit, count }), &state);
            let args: [&[u8]; 4] = [b"LOCK.SETHOLDER", b"k", b"t", bad.bytes()];
            assert_eq!(parse_setholder(&args), Err(want), "{limit} {count}");
        }
        let lock_state = effect::pack(None, &state);
        let args: [&[u8]; 4] = [b"LOCK.SETHOLDER", b"k", b"t", lock_state.bytes()];
        assert_eq!(parse_setholder(&args), Err(LockError::StateInvalid));
        let no_deadline = effect::pack(
            permits,
            &effect::State {
                deadline_ms: -1,
                ..state
            },
        );
        let args: [&[u8]; 4] = [b"LOCK.SETHOLDER", b"k", b"t", no_deadline.bytes()];
        assert_eq!(parse_setholder(&args), Err(LockError::DeadlineInvalid));
    }

    #[test]
    fn multi_key_commands_parse_numkeys_keys_and_options() {
        let args: [&[u8]; 8] = [
            b"LOCK.MACQUIRE",
            b"2",
            b"a\0",
            b"b\r\n",
            b"1000",
            b"TOKEN",
            b"t",
            b"SHARED",
        ];
        let parsed = parse_macquire(&args, 64, 86_400_000).unwrap();
        assert_eq!(parsed.keys, 2..4);
        assert_eq!(
            (parsed.lock.ttl_ms, parsed.lock.token, parsed.lock.shared),
            (1000, Some(&b"t"[..]), true)
        );
        assert_eq!(numkeys_range(&args), Some(2..4));
        let release: [&[u8]; 5] = [b"LOCK.MRELEASE", b"2", b"a", b"b", b"t"];
        assert_eq!(
            parse_mrelease(&release, 64).unwrap(),
            MReleaseArgs {
                keys: 2..4,
                token: b"t"
            }
        );
        let extend: [&[u8]; 6] = [b"LOCK.MEXTEND", b"2", b"a", b"b", b"t", b"500"];
        let parsed = parse_mextend(&extend, 64, 86_400_000).unwrap();
        assert_eq!(
            (parsed.keys, parsed.extend.token, parsed.extend.ttl_ms),
            (2..4, &b"t"[..], 500)
        );
        let synced: [&[u8]; 9] = [
            b"LOCK.MEXTEND",
            b"1",
            b"a",
            b"t",
            b"500",
            b"SYNC",
            b"1",
            b"100",
            b"x",
        ];
        assert_eq!(
            parse_mextend(&synced, 64, 86_400_000),
            Err(LockError::NumkeysMismatch)
        );
    }

    #[test]
    fn multi_key_commands_refuse_bad_numkeys_duplicates_and_too_many_keys() {
        let acquire = |args: &[&[u8]]| parse_macquire(args, 3, 86_400_000).map(|_| ());
        assert_eq!(acquire(&[b"M", b"1", b"a"]), Err(LockError::ArityMAcquire));
        for numkeys in [&b"0"[..], b"-1", b"x", b"", b"1.5", b"99999999999999999999"] {
            assert_eq!(
                acquire(&[b"M", numkeys, b"a", b"100"]),
                Err(LockError::NumkeysInvalid)
            );
        }
        assert_eq!(
            acquire(&[b"M", b"4", b"a", b"b", b"c", b"d", b"100"]),
            Err(LockError::NumkeysTooMany)
        );
        assert_eq!(
            acquire(&[b"M", b"3", b"a", b"b", b"100"]),
            Err(LockError::NumkeysMismatch)
        );
        assert_eq!(
            acquire(&[b"M", b"2", b"a", b"a", b"100"]),
            Err(LockError::KeysDuplicate)
        );
        assert_eq!(
            acquire(&[b"M", b"1", b"a", b"b", b"100"]),
            Err(LockError::TtlNotInteger)
        );
        assert_eq!(numkeys_range(&[&b"M"[..], b"3", b"a"]), None);
        assert_eq!(numkeys_range(&[&b"M"[..], b"-3", b"a"]), None);
        let release = |args: &[&[u8]]| parse_mrelease(args, 3).map(|_| ());
        assert_eq!(release(&[b"M", b"1", b"a"]), Err(LockError::ArityMRelease));
        assert_eq!(
            release(&[b"M", b"1", b"a", b"t", b"u"]),
            Err(LockError::NumkeysMismatch)
        );
        assert_eq!(
            release(&[b"M", b"3", b"a", b"t"]),
            Err(LockError::NumkeysMismatch)
        );
        assert_eq!(
            release(&[b"M", b"2", b"a", b"a", b"t"]),
            Err(LockError::KeysDuplicate)
        );
        let extend = |args: &[&[u8]]| parse_mextend(args, 3, 86_400_000).map(|_| ());
        assert_eq!(
            extend(&[b"M", b"1", b"a", b"t"]),
            Err(LockError::ArityMExtend)
        );
        assert_eq!(
            extend(&[b"M", b"1", b"a", b"t", b"1", b"2"]),
            Err(LockError::NumkeysMismatch)
        );
        assert_eq!(
            extend(&[b"M", b"1", b"a", b"t", b"-1"]),
            Err(LockError::TtlNotPositive)
        );
    }
}
