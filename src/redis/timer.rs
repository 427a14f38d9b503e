//! The one timer helper: a typed payload, a Rust function to run it, and the
//! panic guard. Redis owns a timer until it fires or is stopped; the payload
//! is freed exactly once, either way.
//!
//! Two kinds of timer:
//! - [`start`]: a Redis module timer, `delay_ms` from now.
//! - [`start_at`]: due at a unix millisecond, run as soon as the server's
//!   clock reads it. A Redis timer alone would be late by 0 to 2 ms: its
//!   period is whole milliseconds counted from a microsecond "now", and
//!   Redis' event loop sleeps in whole milliseconds, rounded up. So a
//!   `start_at` timer is a Redis timer armed for its due time (the
//!   backstop) and an entry on a schedule; one Linux timerfd in Redis' event
//!   loop (`RedisModule_EventLoopAdd`), the alarm, rings at the earliest due
//!   time, set absolutely on CLOCK_REALTIME (the clock Redis' `mstime()`
//!   reads, so when it rings the server's clock reads the due millisecond).
//!   When it rings, every timer then due is stopped and started again, due
//!   in the past ([`RESTART_PERIOD_MS`]): Redis runs each in that same turn
//!   of its event loop (the timers come after the file events), each in a
//!   context of its own, as if it had fired on time by itself. Its id
//!   ([`DueId`], the module's own) stays the same. Without the alarm (not
//!   Linux, or the server refused it), the backstop alone runs it.
//!
//! Module-wide state (main thread only: timers, event-loop callbacks and
//! commands all run there): the schedule and the alarm.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::ffi::c_void;
use std::os::raw::c_int;

use redis_module::{raw, Context};

use super::guard::guarded;
use super::server;

/// The period of a timer started again by the alarm: in the past. Redis
/// keys its timers by due microsecond and moves one that collides a
/// microsecond later, so timers started one after the other faster than the
/// clock ticks would be due a little in the future, after the instant its
/// event loop takes as "now" for them, and wait for its next turn (a
/// millisecond); and Redis moves its event-loop timer earlier only for a
/// module timer that becomes the first to fire. Due a second ago, they are
/// the first, and due whatever "now" is.
const RESTART_PERIOD_MS: i64 = -1000;

/// A Redis timer's id ([`start`], [`stop`]).
pub type TimerId = u64;

/// A [`start_at`] timer's id: the module's own, which stays the same while
/// the Redis timer behind it changes.
pub type DueId = u64;

type Callback = unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void);

struct Armed<T> {
    payload: T,
    fire: fn(&Context, T),
    /// A [`start_at`] timer's id, to take it off the schedule as it runs.
    due: Option<DueId>,
}

/// A [`start_at`] timer that has not run yet.
struct Entry {
    /// The Redis timer that holds its payload now.
    timer: TimerId,
    at_ms: i64,
    /// The database it was started in, as Redis keeps for every timer.
    db: i32,
    /// How Redis runs it (`on_timer::<T>`), to start it again.
    callback: Callback,
}

#[derive(Default)]
struct Schedule {
    last_id: DueId,
    entries: HashMap<DueId, Entry>,
    /// The entries the alarm has yet to make due, by due time.
    pending: BTreeSet<(i64, DueId)>,
    /// When the alarm rings next.
    alarm_at: Option<i64>,
}

/// The timerfd in Redis' event loop, and a detached context to stop and
/// start timers from its callback (which gets none).
#[derive(Clone, Copy)]
struct Alarm {
    fd: c_int,
    ctx: *mut raw::RedisModuleCtx,
}

thread_local! {
    static SCHEDULE: RefCell<Schedule> = RefCell::new(Schedule::default());
    static ALARM: Cell<Option<Alarm>> = const { Cell::new(None) };
}

fn with_schedule<R>(f: impl FnOnce(&mut Schedule) -> R) -> R {
    SCHEDULE.with(|s| f(&mut s.borrow_mut()))
}

fn alarm() -> Option<Alarm> {
    ALARM.with(Cell::get)
}

/// At load: set up the alarm of [`start_at`] timers. Whether it is there
/// (if not, those timers run as late as any Redis timer).
pub fn init(ctx: &Context) -> bool {
    #[cfg(target_os = "linux")]
    unsafe {
        let (Some(add), Some(del), Some(detach)) = (
            raw::RedisModule_EventLoopAdd,
            raw::RedisModule_EventLoopDel,
            raw::RedisModule_GetDetachedThreadSafeContext,
        ) else {
            return false;
        };
        let fd = libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let readable = raw::REDISMODULE_EVENTLOOP_READABLE as c_int;
        if add(fd, readable, Some(on_alarm), std::ptr::null_mut()) != raw::Status::Ok as c_int {
            libc::close(fd);
            return false;
        }
        let detached = detach(ctx.get_raw());
        if detached.is_null() {
            del(fd, readable);
            libc::close(fd);
            return false;
        }
        ALARM.with(|a| a.set(Some(Alarm { fd, ctx: detached })));
        true
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = ctx;
        false
    }
}

/// Run `fire(ctx, payload)` on the main thread in `delay_ms` (0: as soon as
/// the event loop comes round). Returns the timer's id, to [`stop`] it.
pub fn start<T: 'static>(
    ctx: &Context,
    delay_ms: i64,
    payload: T,
    fire: fn(&Context, T),
) -> TimerId {
    let armed = Armed {
        payload,
        fire,
        due: None,
    };
    create(ctx.get_raw(), delay_ms, armed).unwrap_or(0)
}

/// Stop a timer started with payload type `T` that has not fired yet, and
/// free its payload.
pub fn stop<T: 'static>(ctx: &Context, timer: TimerId) {
    if let Some(data) = take(ctx.get_raw(), timer) {
        drop(unsafe { Box::from_raw(data.cast::<Armed<T>>()) });
    }
}

/// Run `fire(ctx, payload)` on the main thread as soon as the server's
/// clock reads `at_ms` (unix ms; at once if it already does), in a context
/// of its own that starts in the database selected now. Returns its id, to
/// [`stop_at`] it.
pub fn start_at<T: 'static>(ctx: &Context, at_ms: i64, payload: T, fire: fn(&Context, T)) -> DueId {
    let now_ms = server::now_ms();
    let id = with_schedule(|s| {
        s.last_id += 1;
        s.last_id
    });
    let armed = Armed {
        payload,
        fire,
        due: Some(id),
    };
    // The backstop: never before `at_ms` (its period counts from a later
    // instant than `now_ms`), at most about 2 ms after.
    let Some(timer) = create(ctx.get_raw(), at_ms.saturating_sub(now_ms), armed) else {
        return id;
    };
    let entry = Entry {
        timer,
        at_ms,
        db: server::selected_db(ctx),
        callback: on_timer::<T>,
    };
    let has_alarm = alarm().is_some();
    let ring_at = with_schedule(|s| {
        s.entries.insert(id, entry);
        if at_ms <= now_ms || !has_alarm {
            return None;
        }
        s.pending.insert((at_ms, id));
        if s.alarm_at.is_some_and(|ring| ring <= at_ms) {
            return None;
        }
        s.alarm_at = Some(at_ms);
        Some(at_ms)
    });
    if ring_at.is_some() {
        set_alarm(ring_at);
    }
    id
}

/// Stop a [`start_at`] timer with payload type `T` that has not run yet,
/// and free its payload.
pub fn stop_at<T: 'static>(ctx: &Context, id: DueId) {
    if let Some(entry) = forget(id) {
        stop::<T>(ctx, entry.timer);
    }
}

/// Take a [`start_at`] timer off the schedule (the alarm may still ring for
/// it: it then finds nothing to do).
fn forget(id: DueId) -> Option<Entry> {
    with_schedule(|s| {
        let entry = s.entries.remove(&id)?;
        s.pending.remove(&(entry.at_ms, id));
        Some(entry)
    })
}

fn create<T: 'static>(
    ctx: *mut raw::RedisModuleCtx,
    delay_ms: i64,
    armed: Armed<T>,
) -> Option<TimerId> {
    let data = Box::into_raw(Box::new(armed)).cast::<c_void>();
    unsafe {
        match raw::RedisModule_CreateTimer {
            Some(create) => Some(create(ctx, delay_ms.max(0), Some(on_timer::<T>), data)),
            None => {
                drop(Box::from_raw(data.cast::<Armed<T>>()));
                None
            }
        }
    }
}

/// Stop a Redis timer of this module that has not fired yet: its payload.
fn take(ctx: *mut raw::RedisModuleCtx, timer: TimerId) -> Option<*mut c_void> {
    let mut data: *mut c_void = std::ptr::null_mut();
    unsafe {
        let stop = raw::RedisModule_StopTimer?;
        (stop(ctx, timer, &mut data) == raw::Status::Ok as c_int && !data.is_null()).then_some(data)
    }
}

unsafe extern "C" fn on_timer<T: 'static>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let Armed { payload, fire, due } = *Box::from_raw(data.cast::<Armed<T>>());
    if let Some(id) = due {
        forget(id);
    }
    let ctx = Context::new(ctx);
    guarded(|| fire(&ctx, payload));
}

/// The alarm rang (an event-loop callback: no context).
unsafe extern "C" fn on_alarm(fd: c_int, _data: *mut c_void, _mask: c_int) {
    guarded(|| {
        #[cfg(target_os = "linux")]
        {
            // How many times it rang since: read to quiet it.
            let mut rang = [0u8; 8];
            libc::read(fd, rang.as_mut_ptr().cast(), rang.len());
        }
        #[cfg(not(target_os = "linux"))]
        let _ = fd;
        ring();
    });
}

/// Start every timer now due again, due in the past, so that Redis runs it
/// in this turn of its event loop; set the alarm for the next.
fn ring() {
    let (Some(alarm), Some(create)) = (alarm(), unsafe { raw::RedisModule_CreateTimer }) else {
        return;
    };
    let now_ms = server::now_ms();
    let due: Vec<(DueId, TimerId, i32, Callback)> = with_schedule(|s| {
        s.alarm_at = None;
        let later = s.pending.split_off(&(now_ms.saturating_add(1), 0));
        let due = std::mem::replace(&mut s.pending, later);
        due.into_iter()
            .filter_map(|(_, id)| s.entries.get(&id).map(|e| (id, e.timer, e.db, e.callback)))
            .collect()
    });
    let mut taken = Vec::with_capacity(due.len());
    for (id, timer, db, callback) in due {
        match take(alarm.ctx, timer) {
            Some(data) => taken.push((id, db, callback, data)),
            // Not Redis' to run any more: it ran (and left the schedule).
            None => drop(forget(id)),
        }
    }
    for (id, db, callback, data) in taken {
        let now = unsafe {
            if let Some(select) = raw::RedisModule_SelectDb {
                select(alarm.ctx, db);
            }
            create(alarm.ctx, RESTART_PERIOD_MS, Some(callback), data)
        };
        with_schedule(|s| {
            if let Some(entry) = s.entries.get_mut(&id) {
                entry.timer = now;
            }
        });
    }
    let next = with_schedule(|s| {
        s.alarm_at = s.pending.first().map(|&(at, _)| at);
        s.alarm_at
    });
    set_alarm(next);
}

/// Make the alarm ring when the clock reads `at_ms` (unix ms), or never.
fn set_alarm(at_ms: Option<i64>) {
    let Some(alarm) = alarm() else {
        return;
    };
    #[cfg(target_os = "linux")]
    unsafe {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let value = match at_ms {
            // A time already past rings at once; 0 would disarm it.
            Some(at) => libc::timespec {
                tv_sec: at.max(1).div_euclid(1000) as libc::time_t,
                tv_nsec: (at.max(1).rem_euclid(1000) * 1_000_000) as libc::c_long,
            },
            None => zero,
        };
        let spec = libc::itimerspec {
            it_interval: zero,
            it_value: value,
        };
        libc::timerfd_settime(
            alarm.fd,
            libc::TFD_TIMER_ABSTIME,
            &spec,
            std::ptr::null_mut(),
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (alarm, at_ms);
}
