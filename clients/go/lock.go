package redislock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lock is a held lock: exclusive, shared (a reader), or a semaphore's
// permits. Its Session (or, without one, its own watchdog) keeps it alive
// until Release; Context is cancelled, and Lost closed, when it is lost.
// Its methods are safe for concurrent use.
type Lock struct {
	client  *Client
	req     request
	fence   int64
	session *Session // nil: its own watchdog (or none)

	mu           sync.Mutex
	ttl          time.Duration // what the next extend asks for
	validUntil   time.Time     // sent + ttl of the last acquire or extend: never after the server's deadline
	nextExtend   time.Time
	limitReached bool
	lostErr      *LostError
	released     bool

	ctx    context.Context
	cancel func(cause error)
	lost   chan struct{} // closed on loss
	stop   chan struct{} // closed on loss or release: the watchdog ends
	wake   chan struct{} // the clock moved (a Refresh): the watchdog looks again
}

func newLock(c *Client, req request, fence int64, sent time.Time) *Lock {
	ctx, cancel := withCancelCause(context.Background())
	l := &Lock{
		client: c, req: req, fence: fence, ttl: req.ttl,
		ctx: ctx, cancel: cancel,
		lost: make(chan struct{}), stop: make(chan struct{}), wake: make(chan struct{}, 1),
	}
	l.extended(sent, req.ttl)
	return l
}

// Key is the lock's key (the first of its keys, for ObtainMany's).
func (l *Lock) Key() string { return l.req.key }

// Keys are the lock's keys: one, or ObtainMany's, in the order given.
func (l *Lock) Keys() []string {
	if l.req.keys == nil {
		return []string{l.req.key}
	}
	return append([]string(nil), l.req.keys...)
}

// Token is the lock's token, a UUIDv4 drawn by the client. It is a secret:
// whoever has it can release the lock. Never log it.
func (l *Lock) Token() string { return l.req.token }

// Fence is the lock's fencing token: larger than every fence the server
// issued before. Pass it with every write to the resource, and have the
// resource refuse a fence lower than the highest it has seen.
func (l *Lock) Fence() int64 { return l.fence }

// Shared says whether this is a read lock.
func (l *Lock) Shared() bool { return l.req.kind == reader }

// Count is the number of a semaphore's permits held; 0 for a lock.
func (l *Lock) Count() int {
	if l.req.kind != permits {
		return 0
	}
	return l.req.count
}

// Context is cancelled when the lock is lost or released: do the work
// under it. Err tells why (and, built with Go 1.20 or later,
// context.Cause(ctx) is that *LostError too).
func (l *Lock) Context() context.Context { return l.ctx }

// Session is the session this lock is attached to, which keeps it alive
// with one keepalive for all of its holds; nil when the lock has its own
// watchdog (KeepAliveWatchdog, a server without LOCK.LEASE) or none
// (WithoutWatchdog).
func (l *Lock) Session() *Session { return l.session }

// Lost is closed when the lock is lost (not when it is released).
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err is nil while the lock is held (and after Release); once it is lost, a
// *LostError that is ErrLost.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr == nil {
		return nil
	}
	return l.lostErr
}

// ValidUntil is the end of the lease on the client's clock: the send time of
// the last successful acquire or extend plus its ttl (for an attached lock,
// its session's ValidUntil), never later than the server's deadline. The
// loss is declared a safety margin before.
func (l *Lock) ValidUntil() time.Time {
	if l.session != nil {
		return l.session.ValidUntil()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Refresh sets the lease to end ttl from now (LOCK.EXTEND, SEM.EXTEND);
// later extends by the watchdog use this ttl. When the token no longer holds
// the lock it marks the lock lost and returns a *LostError (ErrLost and
// ErrNotHeld; LostRevoked and ErrRevoked when it was taken away); a LIMIT
// reply is ErrLimit, and the lease still holds until its current deadline.
//
// A lock attached to a Session lives as long as the session's lease, which
// the session keeps alive: Refresh only checks that it still holds (the
// same errors) and moves nothing; ttl is not used.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return err
	}
	if l.session != nil {
		lost, err := l.probe(ctx)
		if err != nil {
			return classify(err)
		}
		if lost != nil {
			return l.lose(lost)
		}
		return nil
	}
	sent := time.Now()
	renewed, err := l.extend(ctx, ttl)
	if lost := refusal(err); lost != nil {
		return l.lose(lost)
	}
	if err != nil {
		return classify(err)
	}
	if !renewed {
		return l.lose(&LostError{Reason: LostRefused})
	}
	l.mu.Lock()
	l.extended(sent, ttl)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

// Release stops the watchdog and gives the lock back (LOCK.RELEASE,
// SEM.RELEASE; LOCK.MRELEASE for every key of ObtainMany's), handing it to
// the first waiter. nil: released (for several keys: every one of them;
// when only some were still held, those are given back and the error is
// ErrNotHeld); ErrNotHeld:
// it was already gone (expired, deleted, overwritten with another type,
// taken, released before). After a
// network error it is safe to call again: each call sends the release anew
// (and for a lock attached to a session, the session sends it again with
// its keepalives until it is answered).
func (l *Lock) Release(ctx context.Context) error {
	_, err := l.release(ctx)
	return err
}

// release is Release with the number of keys the server gave back.
func (l *Lock) release(ctx context.Context) (int64, error) {
	l.mu.Lock()
	if !l.released {
		l.released = true
		l.closeStop()
	}
	l.mu.Unlock()
	if l.session != nil {
		l.session.detach(l)
	}
	l.cancel(nil)
	reply, err := l.client.driver.Do(ctx, l.req.releaseArgs()...)
	if l.session != nil {
		l.session.released(l, err) // with no answer, the session sends it again
	}
	if isWrongType(err) {
		return 0, ErrNotHeld // the key was overwritten with another type: gone
	}
	if err != nil {
		return 0, classify(err)
	}
	n, err := replyInt(reply)
	if err != nil {
		return 0, err
	}
	if n < int64(l.req.holds()) {
		return n, ErrNotHeld
	}
	return n, nil
}

// Guard runs command only while this lock holds (LOCK.GUARD key token
// command args…), in the same atomic step as the check, and returns the
// command's own reply as the Driver gives it (with redigo: use redis.String,
// redis.Int64 and friends on it). When the lock is not held, nothing runs:
// the lock is marked lost and the error is a *LostError (ErrLost,
// ErrNotHeld; LostRevoked and ErrRevoked, with the reason, when it was
// taken away). A read lock runs read-only commands only (a write gets the
// server's error, a ServerError, and the lock stays held). In a cluster,
// the command's keys must share the lock key's hash slot ({tag}).
func (l *Lock) Guard(ctx context.Context, command string, args ...interface{}) (interface{}, error) {
	if l.req.kind == permits {
		return nil, invalidArgument("a semaphore's permits guard no command")
	}
	if l.req.keys != nil {
		return nil, invalidArgument("a lock on several keys guards no command: LOCK.GUARD checks one key")
	}
	if command == "" {
		return nil, invalidArgument("Guard needs a command")
	}
	full := append([]interface{}{"LOCK.GUARD", l.req.key, l.req.token, command}, args...)
	reply, err := l.client.driver.Do(ctx, full...)
	lost := guardRefusal(err)
	if lost == nil && isWrongType(err) && l.overwritten(ctx) {
		lost = &LostError{Reason: LostRefused}
	}
	if lost != nil {
		l.lose(lost)
		return nil, lost // what the server said, whatever was noticed first
	}
	if err != nil {
		return nil, classify(err)
	}
	return reply, nil
}

// run is WithLock's body: fn under a context cancelled on loss, then release.
func (l *Lock) run(ctx context.Context, fn func(ctx context.Context, lock *Lock) error) error {
	work, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		select {
		case <-l.lost:
			cancel()
		case <-finished:
		}
	}()
	err := fn(work, l)
	close(finished)
	cancel()
	releaseCtx, stop := context.WithTimeout(context.Background(), cleanupTimeout)
	releaseErr := l.Release(releaseCtx)
	stop()
	if err != nil {
		return err
	}
	if lost := l.Err(); lost != nil {
		return lost
	}
	if errors.Is(releaseErr, ErrNotHeld) {
		// Gone before the release: the work may not have been protected.
		return &LostError{Reason: LostRefused}
	}
	return releaseErr
}

// overwritten says whether the lock key now holds another type (LOCK.INFO
// answers WRONGTYPE), after a guarded command's WRONGTYPE, which is the
// lock key's or the command's own: the same text comes for both. LOCK.INFO
// reads the lock key alone and changes nothing.
func (l *Lock) overwritten(ctx context.Context) bool {
	_, err := l.client.driver.Do(ctx, "LOCK.INFO", l.req.key)
	return isWrongType(err)
}

// probe asks the server whether the token still holds the lock, with an
// extend (which moves nothing for a hold attached to a lease): nil when it
// does, else the loss (LostRefused, or LostRevoked with the reason); an
// error when there was no answer.
func (l *Lock) probe(ctx context.Context) (*LostError, error) {
	renewed, err := l.extend(ctx, l.req.ttl)
	if lost := refusal(err); lost != nil {
		return lost, nil
	}
	if err != nil {
		return nil, err
	}
	if !renewed {
		return &LostError{Reason: LostRefused}, nil
	}
	return nil, nil
}

// extend sends one LOCK.EXTEND (SEM.EXTEND, LOCK.MEXTEND): true renewed,
// false refused. With SYNC the answer may take the sync timeout: the read
// is bounded by it and a slack, whatever the connection's own timeout.
func (l *Lock) extend(ctx context.Context, ttl time.Duration) (bool, error) {
	ctx, cancel := l.req.bounded(ctx)
	defer cancel()
	reply, err := l.client.driver.Do(ctx, l.req.extendArgs(ttl)...)
	if err != nil {
		return false, err
	}
	n, err := replyInt(reply)
	return n == 1, err
}

// pin extends once right after a WAIT grant, whose moment is unknown, so
// that the deadline counts from a known send. On failure the lock is given
// back (or is already gone) and the error returned.
func (l *Lock) pin() error {
	ctx, cancel := context.WithTimeout(context.Background(), l.req.ttl)
	defer cancel()
	err := l.Refresh(ctx, l.req.ttl)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrLimit):
		// Held until the server's deadline, which is at least sent + ttl.
		l.mu.Lock()
		l.limitReached = true
		l.mu.Unlock()
		return nil
	case errors.Is(err, ErrLost):
		return err
	}
	l.client.releaseQuietly(l.req)
	l.markLost(LostRefused)
	return err
}

// extended moves the clock after a successful acquire or extend sent at
// sent. l.mu is held (or the lock is not shared yet).
func (l *Lock) extended(sent time.Time, ttl time.Duration) {
	l.ttl = ttl
	l.validUntil = sent.Add(ttl)
	l.nextExtend = sent.Add(ttl / 3)
}

// lostAt is when the lock is declared lost without a successful extend.
func (l *Lock) lostAt() time.Time {
	margin := time.Duration(float64(l.ttl) * l.client.margin)
	return l.validUntil.Add(-margin)
}

// markLost records a loss for reason: see lose.
func (l *Lock) markLost(reason LostReason) error {
	return l.lose(&LostError{Reason: reason})
}

// lose records the loss (once: the first keeps its reason), detaches the
// lock from its session, cancels the context (its cause the loss) and
// closes Lost; it returns the loss recorded.
func (l *Lock) lose(lost *LostError) error {
	l.mu.Lock()
	if l.lostErr != nil {
		defer l.mu.Unlock()
		return l.lostErr
	}
	if l.released {
		l.mu.Unlock()
		return lost // given up already: nothing to signal
	}
	l.lostErr = lost
	l.cancel(lost) // before Lost is closed: whoever sees Lost sees the context done
	close(l.lost)
	l.closeStop()
	l.mu.Unlock()
	if l.session != nil {
		l.session.detach(l)
	}
	return lost
}

// closeStop ends the watchdog; l.mu is held.
func (l *Lock) closeStop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
}
