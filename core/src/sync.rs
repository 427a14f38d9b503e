//! `SYNC numreplicas timeout-ms`: a grant (an extension, a guarded write)
//! answered only once that many replicas have acknowledged the replication
//! offset that carries it. No module API shows a replica's acknowledged
//! offset or asks for one, so the module reads them from `INFO
//! replication` (one line per replica) and compares them with the master's
//! offset after the grant: what this file decides, with no Redis types.

use crate::args::Sync;

/// A replica's line of `INFO replication` (`ip=…,port=…,state=online,
/// offset=123,lag=0`, the value of `slaveN`): the offset it has
/// acknowledged, if it is online (a replica still syncing acknowledges
/// nothing of this stream yet).
pub fn acked_offset(line: &[u8]) -> Option<i64> {
    let mut online = false;
    let mut offset = None;
    for field in line.split(|&b| b == b',') {
        let Some(at) = field.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (name, value) = (&field[..at], &field[at + 1..]);
        match name {
            b"state" => online = value == b"online",
            b"offset" => offset = std::str::from_utf8(value).ok()?.parse().ok(),
            _ => {}
        }
    }
    offset.filter(|_| online)
}

/// How many of the replicas' acknowledged `offsets` reach `target`.
pub fn acked(offsets: &[i64], target: i64) -> usize {
    offsets.iter().filter(|&&offset| offset >= target).count()
}

/// Where a request that waits for replicas stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// Enough replicas hold it: answer.
    Synced,
    /// Not yet, and there is time left.
    Waiting,
    /// Its time ran out with `acked` replicas: undo a grant, and say so.
    TimedOut { acked: usize },
}

/// Where a request that wants `wanted` replicas and has `acked` stands at
/// `now_ms`, its wait ending at `deadline_ms` (the replicas count first: an
/// acknowledgement that arrives as the time runs out still counts).
pub fn waited(acked: usize, wanted: u32, deadline_ms: i64, now_ms: i64) -> Waited {
    if acked >= wanted as usize {
        Waited::Synced
    } else if now_ms >= deadline_ms {
        Waited::TimedOut { acked }
    } else {
        Waited::Waiting
    }
}

/// What stands when a request's wait ran out: the reply says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stands {
    /// A new hold, undone as if released (the next waiter is served; its
    /// fence stays used).
    Undone,
    /// An extension (or a renewal by the holder), which nothing can take
    /// back safely: it stands.
    Extension,
    /// A guarded command, which ran.
    Guarded,
    /// A new hold whose token another request was answered as the holder
    /// of while this one waited (a retry on another connection renewed it,
    /// extended it, or ran a guarded write under it): a reply confirmed
    /// it, so it is no longer this request's to undo, and it stands.
    Confirmed,
}

impl Stands {
    /// Whether a request that stands so undoes its grant when its wait
    /// runs out or its client leaves.
    pub fn undoes(self) -> bool {
        self == Stands::Undone
    }
}

/// The error a request whose wait ran out is answered with: `NOSYNC`, how
/// many replicas acknowledged, and what stands.
pub fn no_sync(acked: usize, wanted: u32, stands: Stands) -> String {
    let what = match stands {
        Stands::Undone => "the grant was undone",
        Stands::Extension => "the extension stands",
        Stands::Guarded => "the guarded command ran",
        Stands::Confirmed => "the grant stands, confirmed to its token meanwhile",
    };
    format!("NOSYNC {acked} of {wanted} replicas acknowledged; {what}")
}

/// The requests waiting for their replicas, and the grants no reply has
/// confirmed yet: the one place that decides whether a waiting request is
/// answered or refused with `NOSYNC`, and whether a grant may be undone.
/// The module keeps one (its `T` a blocked client and its answer); the
/// simulator runs the same one.
///
/// The rule that keeps an undo safe: an undo removes only a grant that no
/// reply has confirmed. A new grant is unconfirmed from the moment it is
/// made for a client that has not been told yet (a grant waiting for its
/// replicas, a waiter granted from the queue before its reply goes out)
/// until a reply tells its token that it holds it: its own reply, or one
/// to another request with the same token (a client's retry on another
/// connection after a socket timeout, a second thread), which was answered
/// as the holder because the key was already held by that token. From then
/// on only release, expiry, revocation or its lease's end can take it.
#[derive(Debug)]
pub struct Waiting<T> {
    entries: Vec<Entry<T>>,
    /// The fences of the grants not yet confirmed by any reply (fences are
    /// never reused, so a fence names one grant; a multi-key grant has one).
    unconfirmed: Vec<u64>,
}

#[derive(Debug)]
struct Entry<T> {
    request: T,
    wanted: u32,
    /// When its wait ends (unix ms).
    deadline_ms: i64,
    /// The master's replication offset it waits for: the master's offset
    /// at the first look after its command, when its effects are in the
    /// stream.
    target: Option<i64>,
    stands: Stands,
    /// The fence of the hold it is about, if any.
    fence: Option<u64>,
}

/// A request done waiting.
#[derive(Debug, PartialEq, Eq)]
pub struct Finished<T> {
    pub request: T,
    /// Synced, or the `NOSYNC …` text it is refused with.
    pub synced: Result<(), String>,
    /// Its time ran out on a new grant that no reply confirmed: undo it.
    pub undo: bool,
}

/// What a look at the waiting requests found, besides those it finished.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Looked {
    /// Some request still waits.
    pub waiting: bool,
    /// Some request got the offset it waits for in this look: time to ask
    /// the replicas for fresh acknowledgements.
    pub new_targets: bool,
}

impl<T> Default for Waiting<T> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            unconfirmed: Vec::new(),
        }
    }
}

impl<T> Waiting<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many requests wait for their replicas.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A new grant with `fence` was made for a client not told of it yet.
    pub fn granted(&mut self, fence: u64) {
        if !self.unconfirmed.contains(&fence) {
            self.unconfirmed.push(fence);
        }
    }

    /// A reply told the token of the hold with `fence` that it holds it:
    /// the grant's own reply, or a renewal, an extension, a guarded write
    /// or a lease group's answer to the same token. It is no longer undone.
    pub fn confirm(&mut self, fence: u64) {
        if let Some(at) = self.unconfirmed.iter().position(|&f| f == fence) {
            self.unconfirmed.swap_remove(at);
        }
    }

    /// Whether the grant with `fence` may be undone (no reply confirmed
    /// it); if so, it is undone now and forgotten.
    pub fn undo(&mut self, fence: u64) -> bool {
        let unconfirmed = self.unconfirmed.contains(&fence);
        self.confirm(fence);
        unconfirmed
    }

    /// Whether the new grant with `fence` still waits for its replicas,
    /// unconfirmed (`LOCK.INFO` shows it as `syncing`).
    pub fn syncing(&self, fence: u64) -> bool {
        self.unconfirmed.contains(&fence)
            && self
                .entries
                .iter()
                .any(|e| e.fence == Some(fence) && e.stands == Stands::Undone)
    }

    /// `request` waits for `sync`'s replicas, from `now_ms` for its
    /// timeout; its reply is about the hold with `fence`, and `stands` says
    /// what stands if it is not synced in time (a new grant,
    /// `Stands::Undone`, counts as unconfirmed from now).
    pub fn push(
        &mut self,
        request: T,
        sync: Sync,
        now_ms: i64,
        stands: Stands,
        fence: Option<u64>,
    ) {
        let (wanted, deadline_ms) = (sync.replicas, now_ms.saturating_add(sync.timeout_ms));
        if let (Stands::Undone, Some(fence)) = (stands, fence) {
            self.granted(fence);
        }
        self.entries.push(Entry {
            request,
            wanted,
            deadline_ms,
            target: None,
            stands,
            fence,
        });
    }

    /// What stands for `entry` now: a new grant confirmed meanwhile is no
    /// longer undone.
    fn stands(&self, entry: &Entry<T>) -> Stands {
        match (entry.stands, entry.fence) {
            (Stands::Undone, Some(fence)) if !self.unconfirmed.contains(&fence) => {
                Stands::Confirmed
            }
            (stands, _) => stands,
        }
    }

    /// Look at every request at `now_ms`, the master's offset being
    /// `master` and the replicas' acknowledged ones `offsets`: finish those
    /// whose replicas are enough or whose time ran out. A request not yet
    /// looked at takes `master` as its target only if `set_targets` (the
    /// caller then asks the replicas for it); until then it waits.
    pub fn look(
        &mut self,
        master: i64,
        offsets: &[i64],
        now_ms: i64,
        set_targets: bool,
    ) -> (Vec<Finished<T>>, Looked) {
        let mut finished = Vec::new();
        let mut looked = Looked::default();
        let mut i = 0;
        while i < self.entries.len() {
            let entry = &mut self.entries[i];
            if entry.target.is_none() && !set_targets {
                looked.waiting = true;
                i += 1;
                continue;
            }
            looked.new_targets |= entry.target.is_none();
            let target = *entry.target.get_or_insert(master);
            let outcome = waited(
                acked(offsets, target),
                entry.wanted,
                entry.deadline_ms,
                now_ms,
            );
            let synced = match outcome {
                Waited::Waiting => {
                    looked.waiting = true;
                    i += 1;
                    continue;
                }
                Waited::Synced => Ok(()),
                Waited::TimedOut { acked } => {
                    Err(no_sync(acked, entry.wanted, self.stands(&self.entries[i])))
                }
            };
            let entry = self.entries.swap_remove(i);
            let undo = synced.is_err() && self.stands(&entry).undoes();
            finished.push(Finished {
                request: entry.request,
                synced,
                undo,
            });
        }
        (finished, looked)
    }

    /// Take out the first request `is` picks (its client left): the
    /// request, and whether its grant, which it never learned of, is to be
    /// undone (a new grant that no reply confirmed).
    pub fn leave(&mut self, is: impl Fn(&T) -> bool) -> Option<(T, bool)> {
        let at = self.entries.iter().position(|e| is(&e.request))?;
        let entry = self.entries.swap_remove(at);
        let undo = self.stands(&entry).undoes();
        Some((entry.request, undo))
    }

    /// Take out every request (this node became a replica: nothing it
    /// granted is undone here; its new master decides).
    pub fn drain(&mut self) -> Vec<T> {
        self.unconfirmed.clear();
        self.entries.drain(..).map(|e| e.request).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_online_replicas_offset_is_read_from_its_info_line() {
        let line = b"ip=127.0.0.1,port=6380,state=online,offset=12345,lag=0";
        assert_eq!(acked_offset(line), Some(12345));
        assert_eq!(
            acked_offset(b"ip=127.0.0.1,port=6380,state=wait_bgsave,offset=0,lag=0"),
            None
        );
        assert_eq!(acked_offset(b"ip=::1,port=1,state=online,lag=0"), None);
        assert_eq!(acked_offset(b"state=online,offset=x"), None);
        assert_eq!(acked_offset(b""), None);
        assert_eq!(acked_offset(b"garbage,,=,offset=="), None);
    }

    #[test]
    fn a_wait_ends_when_enough_replicas_hold_it_or_its_time_runs_out() {
        assert_eq!(acked(&[10, 20, 30], 20), 2);
        assert_eq!(acked(&[], 1), 0);
        assert_eq!(waited(2, 2, 100, 500), Waited::Synced, "the replicas first");
        assert_eq!(waited(1, 2, 100, 99), Waited::Waiting);
        assert_eq!(waited(1, 2, 100, 100), Waited::TimedOut { acked: 1 });
        assert_eq!(
            no_sync(1, 2, Stands::Undone),
            "NOSYNC 1 of 2 replicas acknowledged; the grant was undone"
        );
        assert!(no_sync(0, 1, Stands::Extension).ends_with("the extension stands"));
        assert!(no_sync(0, 1, Stands::Guarded).ends_with("the guarded command ran"));
    }
}
