package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

const (
	// waitReadSlack: a dedicated connection reads this much longer than the
	// server's WAIT (or OBSERVE) timeout, so that the server's own answer
	// always comes first.
	waitReadSlack = 5 * time.Second
	// deadlineGrace: when the caller's deadline bounded a WAIT, how long
	// past it Obtain waits for the server's answer, which is due then.
	deadlineGrace = time.Second
	// cleanupTimeout bounds a release sent after an error.
	cleanupTimeout = 5 * time.Second
	// defaultMargin: Lock.Context is cancelled this fraction of the ttl
	// before the client's deadline.
	defaultMargin = 0.1
)

// Client takes and keeps locks, semaphores' permits and elections through a
// Driver, and keeps them alive with one Session per node and ttl (or a
// watchdog per lock: WithKeepAlive). It is safe for concurrent use.
type Client struct {
	driver    Driver
	margin    float64
	keepalive KeepAlive
	sessions  *sessions

	moduleMu      sync.Mutex
	moduleChecked bool // MODULE LIST said the module is recent enough
}

// ClientOption adjusts a Client.
type ClientOption func(*Client)

// WithSafetyMargin sets the fraction of the ttl (0 to 0.5, default 0.1) by
// which a lock is declared lost before the client's own deadline, when no
// extend has succeeded. New panics on a value outside [0, 0.5).
func WithSafetyMargin(fraction float64) ClientOption {
	return func(c *Client) {
		if !(fraction >= 0 && fraction < 0.5) {
			panic(fmt.Sprintf("redislock: safety margin must be in [0, 0.5), not %v", fraction))
		}
		c.margin = fraction
	}
}

// New is a Client over driver: NewRedigo(pool) for one server, or
// cluster.New(c) for Redis Cluster through redisc.
func New(driver Driver, opts ...ClientOption) *Client {
	c := &Client{driver: driver, margin: defaultMargin}
	for _, opt := range opts {
		opt(c)
	}
	c.sessions = newSessions(c)
	return c
}

// nodeOf is the node that serves key: "" without a Router.
func (c *Client) nodeOf(ctx context.Context, key string, refresh bool) (string, error) {
	if router, ok := c.driver.(Router); ok {
		return router.NodeOf(ctx, key, refresh)
	}
	return "", nil
}

// doOn sends a command with no key (LOCK.LEASE) to node.
func (c *Client) doOn(ctx context.Context, node string, args ...interface{}) (interface{}, error) {
	if router, ok := c.driver.(Router); ok {
		return router.DoOn(ctx, node, args...)
	}
	return c.driver.Do(ctx, args...)
}

// MaxReasonBytes bounds a revocation's reason.
const MaxReasonBytes = 128

// Revoke takes the lock on key back from whoever holds it (LOCK.REVOKE key
// [REASON reason]): every current hold of key (a lock, each reader, each
// semaphore holder) ends as a release would end it, waiters are served at
// once, and the result is the number of holds ended (0 when free). Each
// holder learns it: its extends and guarded commands get REVOKED <reason>
// (with this package, its Context is cancelled and Err is a *LostError,
// LostRevoked, whose Revoked is the reason). reason is 1 to 128 bytes, or
// "" for the server's default ("revoked by an operator"). An operator's
// call: the server puts LOCK.REVOKE in @dangerous and @admin.
func (c *Client) Revoke(ctx context.Context, key, reason string) (int64, error) {
	if err := c.checkModule(ctx, key); err != nil {
		return 0, err
	}
	if key == "" {
		return 0, invalidArgument("key must not be empty")
	}
	if len(reason) > MaxReasonBytes {
		return 0, invalidArgument(fmt.Sprintf("reason must be 1 to %d bytes, not %d", MaxReasonBytes, len(reason)))
	}
	args := []interface{}{"LOCK.REVOKE", key}
	if reason != "" {
		args = append(args, "REASON", reason)
	}
	reply, err := c.driver.Do(ctx, args...)
	if err != nil {
		return 0, err
	}
	return replyInt(reply)
}

// Obtain takes the lock on key for ttl, and keeps it alive until Release:
// attached to the Client's Session for this ttl (and, in a cluster, the
// key's master), whose one LOCK.LEASE KEEPALIVE every ttl/3 keeps all of
// its holds alive; or, with KeepAliveWatchdog or on a server without
// LOCK.LEASE, with a watchdog of its own (LOCK.EXTEND every ttl/3).
//
// Without Wait it does not block: ErrNotObtained at once when another token
// holds the key (or others wait for it). With Wait(d) it queues in the
// server's FIFO queue on a connection of its own for up to d, or until ctx's
// deadline when that is sooner (then the error is also
// context.DeadlineExceeded); when ctx is cancelled it leaves the queue (by
// closing that connection) and returns ctx.Err(). On any error after the
// command may have been sent (a lost reply, a cancelled wait) it releases
// with the token it drew before returning.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	req, err := newRequest(exclusive, key, ttl, collect(opts))
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, req)
}

// ObtainMany takes one lock over every key of keys at once, all or none
// (LOCK.MACQUIRE): one token, one fence (above every fence any of the keys
// had), one lease, kept alive as Obtain's (its Session's keepalive, or its
// watchdog's LOCK.MEXTEND). ErrNotObtained when any key is busy: nothing is
// then held. It is lost, as a whole, when any of its keys is (a DEL, an
// expiry, a revocation of one key); Release gives every key back (LOCK.MRELEASE).
// Options as Obtain's (Wait queues on every key at once, holding none while
// it waits; Shared takes a read lease on every key; Sync). Guard is refused:
// LOCK.GUARD checks one key. In a cluster the keys must share a hash slot
// ({tag}).
func (c *Client) ObtainMany(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*Lock, error) {
	req, err := newManyRequest(keys, ttl, collect(opts))
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, req)
}

// WithLock obtains the lock, runs fn with a context that is cancelled when the
// lock is lost (or ctx is done), and releases the lock. It returns fn's error;
// else a *LostError (ErrLost) when the lock was lost before fn returned; else
// Obtain's error (ErrNotObtained when it is held).
func (c *Client) WithLock(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, lock *Lock) error, opts ...Option) error {
	lock, err := c.Obtain(ctx, key, ttl, opts...)
	if err != nil {
		return err
	}
	return lock.run(ctx, fn)
}

// Info is LOCK.INFO: nil when the key is free.
type Info struct {
	Fence    int64         // the holder's fence (the highest reader's, for a shared lock)
	TTL      time.Duration // left in the lease; -1 without a TTL
	Deadline time.Time     // the end of the lease; zero without a TTL
	Granted  time.Time     // when the holder was granted the lock
	Extends  int64         // extensions since the grant
	Waiters  int64         // clients waiting in the queue
	Holders  int64         // readers holding a shared lock (1 for an exclusive one)
	Shared   bool          // held in shared mode
	Owner    string        // the holder's label; "" without one
	Lease    int64         // the public number of the lease the hold is attached to (a Session's); 0 for none
}

// Info is LOCK.INFO key: nil when free. The token is never part of it.
func (c *Client) Info(ctx context.Context, key string) (*Info, error) {
	if err := c.checkModule(ctx, key); err != nil {
		return nil, err
	}
	reply, err := c.driver.Do(ctx, "LOCK.INFO", key)
	if err != nil {
		return nil, err
	}
	fields, err := replyFields(reply)
	if fields == nil || err != nil {
		return nil, err
	}
	info := &Info{Holders: 1}
	for name, value := range fields { // fields of later versions are skipped
		switch name {
		case "owner":
			info.Owner, err = replyString(value)
		case "mode":
			var mode string
			mode, err = replyString(value)
			info.Shared = mode == "shared"
		case "fence", "ttl", "deadline", "granted", "extends", "waiters", "holders", "lease":
			var n int64
			if n, err = replyInt(value); err != nil {
				break
			}
			switch name {
			case "fence":
				info.Fence = n
			case "ttl":
				info.TTL = durationOrNone(n)
			case "deadline":
				info.Deadline = unixMs(n)
			case "granted":
				info.Granted = unixMs(n)
			case "extends":
				info.Extends = n
			case "waiters":
				info.Waiters = n
			case "holders":
				info.Holders = n
			case "lease":
				info.Lease = n
			}
		}
		if err != nil {
			return nil, fmt.Errorf("redislock: LOCK.INFO field %q: %w", name, err)
		}
	}
	return info, nil
}

func durationOrNone(n int64) time.Duration {
	if n < 0 {
		return -1
	}
	return time.Duration(n) * time.Millisecond
}

func unixMs(n int64) time.Time {
	if n < 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// acquire sends the request with the lease of its session (or none): at
// once, or waiting on a connection of its own. An acquire answered NOLEASE
// is sent once more: with a new lease when the session's has ended, with
// the lease of the key's node when the key is another node's than this
// client thought, or with a watchdog of its own when the lease lives but
// the key is served elsewhere (a slot being migrated); a wait then waits
// what is left of it.
func (c *Client) acquire(ctx context.Context, req request) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.checkModule(ctx, req.key); err != nil {
		return nil, err
	}
	started := time.Now()
	own := false
	for retried := false; ; retried = true {
		var session *Session
		if !own {
			var err error
			if session, err = c.sessions.join(ctx, req); err != nil {
				return nil, err
			}
		}
		lock, err := c.acquireWith(ctx, req, session)
		if session == nil || retried || !isNoLease(err) {
			return lock, err
		}
		own = c.sessions.noLease(ctx, session, req.key)
		if req.waits && req.wait > 0 {
			if req.wait -= time.Since(started); req.wait < time.Millisecond {
				return nil, &timedOut{}
			}
		}
	}
}

func (c *Client) acquireWith(ctx context.Context, req request, session *Session) (*Lock, error) {
	lease := ""
	if session != nil {
		defer session.leave()
		lease = session.id
	}
	if req.waits {
		return c.acquireWaiting(ctx, req, session, lease)
	}
	bounded, cancel := req.bounded(ctx)
	defer cancel()
	sent := time.Now() // with a monotonic reading
	reply, err := c.driver.Do(bounded, req.args(0, lease)...)
	if err != nil {
		c.releaseAfter(err, req)
		return nil, classify(err)
	}
	fence, granted, err := fenceOf(reply)
	if err != nil {
		return nil, err
	}
	if !granted {
		return nil, ErrNotObtained
	}
	return c.held(req, fence, sent, session, false)
}

// held is the Lock of a grant: attached to its session, or kept alive by
// its own watchdog (after an extend that pins the lease, when the grant
// came after a WAIT).
func (c *Client) held(req request, fence int64, sent time.Time, session *Session, waited bool) (*Lock, error) {
	lock := newLock(c, req, fence, sent)
	if session != nil {
		lock.session = session
		if lost := session.attach(lock); lost != nil {
			// The lease ended before the grant's reply came.
			c.releaseQuietly(req)
			return nil, lost
		}
		return lock, nil
	}
	if waited {
		if err := lock.pin(); err != nil {
			return nil, err
		}
	}
	lock.start()
	return lock, nil
}

type result struct {
	reply interface{}
	err   error
}

// acquireWaiting queues in the server on a dedicated connection. A hold of
// its own then pins its lease with one extend: the grant's moment is
// unknown, so the deadline counts from that extend's send. An attached
// hold needs none: it lives as long as its session's lease, whose clock
// its keepalives set (and the session is kept alive while the acquire
// waits).
func (c *Client) acquireWaiting(ctx context.Context, req request, session *Session, lease string) (*Lock, error) {
	wait, byContext := req.wait, false
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if left < time.Millisecond {
			return nil, &timedOut{byContext: true}
		}
		if wait == 0 || left < wait {
			wait, byContext = left, true
		}
	}
	conn, err := c.driver.Dedicated(ctx, req.key)
	if err != nil {
		return nil, err
	}
	readTimeout := time.Duration(0) // WAIT 0: no limit, until ctx is done
	if wait > 0 {
		readTimeout = wait + req.sync.timeout + waitReadSlack
	}
	sent := time.Now()
	replies := make(chan result, 1)
	go func() {
		reply, err := conn.Do(readTimeout, req.args(ms(wait), lease)...)
		replies <- result{reply, err}
	}()
	var got result
	select {
	case got = <-replies:
	case <-ctx.Done():
		var ok bool
		if byContext && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The server's own timeout is due now: its answer settles it.
			got, ok = receive(replies, deadlineGrace+req.sync.timeout)
		}
		if !ok {
			_ = conn.Close() // leaves the server's queue
			receive(replies, cleanupTimeout)
			c.releaseQuietly(req)
			if byContext && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, &timedOut{byContext: true}
			}
			return nil, ctx.Err()
		}
	}
	_ = conn.Close()
	if got.err != nil {
		c.releaseAfter(got.err, req)
		return nil, classify(got.err)
	}
	fence, granted, err := fenceOf(got.reply)
	if err != nil {
		return nil, err
	}
	if !granted {
		return nil, &timedOut{byContext: byContext}
	}
	return c.held(req, fence, sent, session, true)
}

// receive waits up to timeout for a result.
func receive(results <-chan result, timeout time.Duration) (result, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case got := <-results:
		return got, true
	case <-timer.C:
		return result{}, false
	}
}

// releaseAfter releases with the request's token after a transport error,
// after which the command may have run; an error reply granted nothing,
// but for a NOSYNC whose grant stands (confirmed to the token meanwhile:
// given back here, since the caller is told it holds nothing).
func (c *Client) releaseAfter(err error, req request) {
	var reply ServerError
	if !errors.As(err, &reply) {
		c.releaseQuietly(req)
		return
	}
	if reply.Code() == "NOSYNC" && !notReplicated(reply).Undone {
		c.releaseQuietly(req)
	}
}

// releaseQuietly gives back what the token may hold; else it ends at its ttl.
func (c *Client) releaseQuietly(req request) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = c.driver.Do(ctx, req.releaseArgs()...)
}
