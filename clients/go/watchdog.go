package redislock

// The watchdog: one goroutine per lock, for a lock that is not attached to
// a Session (KeepAliveWatchdog, a server without LOCK.LEASE, or
// WithoutWatchdog, where it only watches the deadline). It extends the
// lease every ttl/3, on the Client's Driver, and declares the lock lost
// when the server refuses an extend (0, or REVOKED with the reason), or
// when the deadline less the safety margin comes with no successful extend
// (counted on the monotonic clock from the send of the last successful
// acquire or extend). session.go keeps attached locks alive instead.

import (
	"context"
	"errors"
	"time"
)

// start runs the lock's keepalive: its watchdog, or with WithoutWatchdog
// only the deadline watch.
func (l *Lock) start() {
	go l.watch()
}

func (l *Lock) watch() {
	deadline := time.NewTimer(time.Hour)
	next := time.NewTimer(time.Hour)
	defer deadline.Stop()
	defer next.Stop()
	var renewals chan renewal // non-nil while an extend is in flight
	for {
		l.mu.Lock()
		lostAt, nextAt, ttl := l.lostAt(), l.nextExtend, l.ttl
		extending := l.req.watchdog && !l.limitReached && renewals == nil
		l.mu.Unlock()
		reset(deadline, time.Until(lostAt))
		if extending {
			reset(next, time.Until(nextAt))
		} else {
			reset(next, time.Hour)
		}
		select {
		case <-l.stop:
			return
		case <-l.wake:
		case <-deadline.C:
			l.mu.Lock()
			reason := LostExpired
			if l.limitReached {
				reason = LostLimit
			}
			stillDue := !time.Now().Before(l.lostAt())
			l.mu.Unlock()
			if stillDue {
				l.markLost(reason)
				return
			}
		case <-next.C:
			if extending {
				renewals = make(chan renewal, 1)
				go l.renew(ttl, lostAt, renewals)
			}
		case got := <-renewals:
			renewals = nil
			if done := l.renewed(got); done {
				return
			}
		}
	}
}

// renewal is the outcome of one extend by the watchdog.
type renewal struct {
	sent    time.Time
	ttl     time.Duration
	renewed bool
	err     error
}

// renew sends one extend, bounded by the time left before the lock would be
// declared lost.
func (l *Lock) renew(ttl time.Duration, lostAt time.Time, out chan<- renewal) {
	ctx, cancel := context.WithDeadline(context.Background(), lostAt)
	defer cancel()
	sent := time.Now()
	renewed, err := l.extend(ctx, ttl)
	out <- renewal{sent: sent, ttl: ttl, renewed: renewed, err: err}
}

// renewed applies an extend's outcome; true when the watchdog is done.
func (l *Lock) renewed(got renewal) bool {
	if lost := refusal(got.err); lost != nil {
		l.lose(lost) // REVOKED: taken away
		return true
	}
	if got.err != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		if errors.Is(classify(got.err), ErrLimit) { // the lease ends at its deadline
			l.limitReached = true
			return false
		}
		// Try again until the deadline: a reconnect in between costs nothing,
		// and an extend answered NOSYNC stands on the master only, so it
		// moves nothing here.
		l.nextExtend = time.Now().Add(retryDelay(l.ttl))
		return false
	}
	if !got.renewed {
		l.markLost(LostRefused)
		return true
	}
	l.mu.Lock()
	if got.sent.Add(got.ttl).After(l.validUntil) {
		l.extended(got.sent, got.ttl)
	}
	l.mu.Unlock()
	return false
}

// retryDelay is the pause after a failed extend.
func retryDelay(ttl time.Duration) time.Duration {
	if d := ttl / 20; d < 500*time.Millisecond {
		return d
	}
	return 500 * time.Millisecond
}

// reset sets t to fire after d (at once when d <= 0).
func reset(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	if d < 0 {
		d = 0
	}
	t.Reset(d)
}
