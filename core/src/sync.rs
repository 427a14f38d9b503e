//! `SYNC numreplicas timeout-ms`: a grant (an extension, a guarded write)
//! answered only once that many replicas have acknowledged the replication
//! offset that carries it. No module API shows a replica's acknowledged
//! offset or asks for one, so the module reads them from `INFO
//! replication` (one line per replica) and compares them with the master's
//! offset after the grant: what this file decides, with no Redis types.

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
}

/// The error a request whose wait ran out is answered with: `NOSYNC`, how
/// many replicas acknowledged, and what stands.
pub fn no_sync(acked: usize, wanted: u32, stands: Stands) -> String {
    let what = match stands {
        Stands::Undone => "the grant was undone",
        Stands::Extension => "the extension stands",
        Stands::Guarded => "the guarded command ran",
    };
    format!("NOSYNC {acked} of {wanted} replicas acknowledged; {what}")
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
