package redislock

import (
	"context"
	"time"
)

// DefaultObserveTimeout is how long one LOCK.OBSERVE of an observer blocks
// on the server before it asks again.
const DefaultObserveTimeout = 30 * time.Second

// Election is leader election on one lock key: whoever holds it leads
// (docs/leader-election.md). Candidates wait in the server's queue
// (Campaign); followers receive each change of leader (Observe), with no
// polling.
type Election struct {
	client         *Client
	key            string
	ttl            time.Duration
	opts           options
	ObserveTimeout time.Duration // one LOCK.OBSERVE's timeout; DefaultObserveTimeout when 0
}

// Election is the election on key whose leader holds a lease of ttl. Options:
// Owner (the label followers see), WithoutWatchdog.
func (c *Client) Election(key string, ttl time.Duration, opts ...Option) *Election {
	return &Election{client: c, key: key, ttl: ttl, opts: collect(opts)}
}

// Campaign waits in the queue (WAIT 0: no limit) on a connection of its own
// until it leads, and returns the leader's Lock: its Context is cancelled
// when it is deposed; Release resigns, handing the lead to the next
// candidate. With a deadline on ctx, ErrNotObtained (and
// context.DeadlineExceeded) when it passes first; when ctx is cancelled,
// ctx.Err(), and the candidate has left the queue.
func (e *Election) Campaign(ctx context.Context) (*Lock, error) {
	o := e.opts
	o.waits, o.wait = false, 0
	req, err := newRequest(exclusive, e.key, e.ttl, o)
	if err != nil {
		return nil, err
	}
	req.waits, req.wait = true, 0
	return e.client.acquire(ctx, req)
}

// Leader is a leader as Election.Leader and Election.Observe see it.
type Leader struct {
	Fence int64         // larger than every earlier leader's: pass it with every leader-only write
	Owner string        // the label it campaigned with; "" without one
	TTL   time.Duration // left in its lease when the server answered; -1 without a TTL
}

// Leader is the leader now (LOCK.INFO); nil when nobody leads.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	reply, err := e.client.driver.Do(ctx, "LOCK.INFO", e.key)
	if err != nil {
		return nil, err
	}
	return leaderOf(reply)
}

// Observation is what Observe sends: the leader (nil: nobody leads), or an
// error of the observer's connection, after which it reconnects and sends
// the leader then.
type Observation struct {
	Leader *Leader
	Err    error
}

// Observe sends the leader now, then each change of leader as it happens
// (LOCK.OBSERVE key <last fence> <timeout>, on a connection of its own).
// After a connection error it sends an Observation with Err, pauses (100 ms,
// doubling up to 2 s), reconnects and sends the leader again. The channel is
// closed once ctx is done.
func (e *Election) Observe(ctx context.Context) <-chan Observation {
	out := make(chan Observation)
	go func() {
		defer close(out)
		pause := 100 * time.Millisecond
		for {
			sentAny, err := e.observe(ctx, out)
			if ctx.Err() != nil {
				return
			}
			if sentAny {
				pause = 100 * time.Millisecond
			}
			if !send(ctx, out, Observation{Err: err}) {
				return
			}
			timer := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			if pause *= 2; pause > 2*time.Second {
				pause = 2 * time.Second
			}
		}
	}()
	return out
}

// observe follows the leader on one dedicated connection until an error (or
// ctx is done); it says whether it sent anything.
func (e *Election) observe(ctx context.Context, out chan<- Observation) (bool, error) {
	// The connection is dialled within waitReadSlack, as its commands are
	// read within their timeout plus it: a server that does not answer
	// is an error to report and retry, whatever ctx's deadline.
	dialCtx, cancel := context.WithTimeout(ctx, waitReadSlack)
	conn, err := e.client.driver.Dedicated(dialCtx, e.key)
	cancel()
	if err != nil {
		return false, err
	}
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done():
		case <-finished:
		}
		_ = conn.Close()
	}()
	timeout := e.ObserveTimeout
	if timeout <= 0 {
		timeout = DefaultObserveTimeout
	}
	reply, err := conn.Do(waitReadSlack, "LOCK.INFO", e.key)
	if err != nil {
		return false, err
	}
	leader, err := leaderOf(reply)
	if err != nil {
		return false, err
	}
	if !send(ctx, out, Observation{Leader: leader}) {
		return true, ctx.Err()
	}
	for {
		reply, err := conn.Do(timeout+waitReadSlack, "LOCK.OBSERVE", e.key, fenceSeen(leader), ms(timeout))
		if err != nil {
			return true, err
		}
		now, err := leaderOf(reply)
		if err != nil {
			return true, err
		}
		if fenceSeen(now) == fenceSeen(leader) {
			leader = now // the observe timed out: same leader
			continue
		}
		leader = now
		if !send(ctx, out, Observation{Leader: leader}) {
			return true, ctx.Err()
		}
	}
}

func send(ctx context.Context, out chan<- Observation, o Observation) bool {
	select {
	case out <- o:
		return true
	case <-ctx.Done():
		return false
	}
}

// fenceSeen is what LOCK.OBSERVE takes as the holder last seen: 0 for nobody.
func fenceSeen(leader *Leader) int64 {
	if leader == nil {
		return 0
	}
	return leader.Fence
}

// leaderOf reads the holder in a LOCK.OBSERVE or LOCK.INFO reply.
func leaderOf(reply interface{}) (*Leader, error) {
	fields, err := replyFields(reply)
	if fields == nil || err != nil {
		return nil, err
	}
	leader := &Leader{TTL: -1}
	if leader.Fence, err = replyInt(fields["fence"]); err != nil {
		return nil, err
	}
	if ttl, err := replyInt(fields["ttl"]); err == nil {
		leader.TTL = durationOrNone(ttl)
	}
	if owner, ok := fields["owner"]; ok {
		if leader.Owner, err = replyString(owner); err != nil {
			return nil, err
		}
	}
	return leader, nil
}
