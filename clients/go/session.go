package redislock

// Sessions, after etcd's concurrency.Session: one server lease (LOCK.LEASE
// GRANT) per node and per ttl, granted when the first hold needs it, kept
// alive by one goroutine (LOCK.LEASE KEEPALIVE every ttl/3) for every hold
// attached to it (LEASE id on the acquire). No hold of a session is
// extended on its own; each keeps its own loss signal (Context, Lost, Err),
// which the session fires.
//
// - A keepalive answered 1 moves the session's clock (from its send), and
//   with it every hold's. Then LOCK.LEASE INFO's count of holds is compared
//   with this client's: fewer on the server means a hold ended one by one
//   (DEL, an overwrite, LOCK.REVOKE key), and each hold is asked
//   (LOCK.EXTEND, which moves nothing for an attached hold): one the server
//   no longer has is lost, LostRefused or LostRevoked with the reason.
// - A keepalive answered 0, or an acquire answered NOLEASE: the lease is
//   gone on the server (revoked, run out, or the server lost it). Each hold
//   is asked why, and all of them are lost together (LostRevoked "lease
//   revoked" after LOCK.LEASE REVOKE, else LostRefused). The next hold gets
//   a new lease; an acquire answered NOLEASE is sent once more, with it.
// - No successful keepalive before the lease's deadline less the safety
//   margin (server down, paused, unreachable): every hold is lost at once
//   (LostExpired).
//
// A hold whose release got no answer (a network error) stays on the server,
// attached to the lease: the session sends its release again with each
// keepalive until one is answered, so that the lease does not keep it
// alive for the session's life.
//
// A session nobody uses (no hold, no acquire in flight) is not kept alive:
// a hold taken before its deadline less the margin attaches to it (and a
// keepalive is sent at once if one is due), a later one grants a new lease.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// KeepAlive is how the holds taken through a Client are kept alive
// (WithKeepAlive).
type KeepAlive int

const (
	// KeepAliveAuto (the default): a Session where the server has
	// LOCK.LEASE, else a watchdog per lock. The first hold asks for the
	// session's lease; an unknown command (a module without lease groups)
	// or NOPERM (an ACL user without LOCK.LEASE) makes the Client use
	// watchdogs from then on, without asking again.
	KeepAliveAuto KeepAlive = iota
	// KeepAliveSession: always a Session; an acquire fails with the
	// server's error where it has no LOCK.LEASE.
	KeepAliveSession
	// KeepAliveWatchdog: a watchdog per lock (LOCK.EXTEND or SEM.EXTEND
	// every ttl/3), as before sessions.
	KeepAliveWatchdog
)

func (k KeepAlive) String() string {
	switch k {
	case KeepAliveAuto:
		return "auto"
	case KeepAliveSession:
		return "session"
	case KeepAliveWatchdog:
		return "watchdog"
	}
	return fmt.Sprintf("KeepAlive(%d)", int(k))
}

// WithKeepAlive sets how holds are kept alive: KeepAliveAuto (default),
// KeepAliveSession or KeepAliveWatchdog. A lock taken WithoutWatchdog is
// kept alive by neither.
func WithKeepAlive(mode KeepAlive) ClientOption {
	return func(c *Client) { c.keepalive = mode }
}

// support is whether the server has LOCK.LEASE for this Client's user.
type support int

const (
	supportUnknown support = iota
	supportYes
	supportNo
)

// sessionKey is which lease a hold attaches to: the node that serves its
// key ("" without a Router) and its ttl.
type sessionKey struct {
	node string
	ttl  time.Duration
}

// sessions are a Client's sessions.
type sessions struct {
	client   *Client
	granting chan struct{} // one grant at a time: holds asked for at once share one lease

	mu      sync.Mutex
	support support
	current map[sessionKey]*Session
}

func newSessions(c *Client) *sessions {
	return &sessions{client: c, granting: make(chan struct{}, 1), current: map[sessionKey]*Session{}}
}

// join is the live session a hold of req attaches to, granted now if there
// is none, with the acquire counted as in flight (call leave after it); nil
// when the hold keeps its own watchdog (or none).
func (ss *sessions) join(ctx context.Context, req request) (*Session, error) {
	mode := ss.client.keepalive
	if !req.watchdog || mode == KeepAliveWatchdog || req.sync.replicas > 0 {
		// A keepalive carries no SYNC: a lock taken with Sync keeps its own
		// watchdog, whose extends do.
		return nil, nil
	}
	ss.mu.Lock()
	lacking := ss.support == supportNo
	ss.mu.Unlock()
	if mode == KeepAliveAuto && lacking {
		return nil, nil
	}
	node, err := ss.client.nodeOf(ctx, req.key, false)
	if err != nil {
		return nil, err
	}
	which := sessionKey{node: node, ttl: req.ttl}
	select {
	case ss.granting <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-ss.granting }()
	ss.mu.Lock()
	current := ss.current[which]
	ss.mu.Unlock()
	if current != nil && current.enter() {
		return current, nil
	}
	sent := time.Now()
	reply, err := ss.client.doOn(ctx, node, "LOCK.LEASE", "GRANT", ms(req.ttl))
	if err != nil {
		if mode == KeepAliveAuto && lacksLeases(err) {
			ss.mu.Lock()
			ss.support = supportNo
			ss.mu.Unlock()
			return nil, nil
		}
		return nil, classify(err)
	}
	id, err := replyString(reply)
	if err != nil {
		return nil, err
	}
	session := &Session{
		client: ss.client, id: id, node: node, ttl: req.ttl,
		holds: map[*Lock]struct{}{}, orphans: map[*Lock]struct{}{}, pending: 1,
		done: make(chan struct{}), wake: make(chan struct{}, 1),
	}
	session.renewedAt(sent)
	ss.mu.Lock()
	ss.support = supportYes
	for key, old := range ss.current {
		if old.Err() != nil {
			delete(ss.current, key) // ended: forget it, whatever ttl it had
		}
	}
	ss.current[which] = session
	ss.mu.Unlock()
	go session.keep()
	return session, nil
}

// noLease: an acquire with session's lease was answered NOLEASE. With a
// Router the key may be another node's than this client thought (the slot
// map is read again, and the session is left alone when it was). Else a
// keepalive asks the session's node: 0, the lease is gone, and so is every
// hold attached to it; 1, the lease lives and the key was served by
// another node (ASK, during a slot's migration): true, the hold is to keep
// a watchdog of its own.
func (ss *sessions) noLease(ctx context.Context, session *Session, key string) bool {
	if _, ok := ss.client.driver.(Router); ok {
		if node, err := ss.client.nodeOf(ctx, key, true); err == nil && node != session.node {
			return false
		}
	}
	sent := time.Now()
	reply, err := ss.client.doOn(ctx, session.node, "LOCK.LEASE", "KEEPALIVE", session.id)
	if err != nil {
		return false // no answer: the retry tells
	}
	if alive, err := replyInt(reply); err != nil || alive != 1 {
		session.endedByServer()
		return false
	}
	session.mu.Lock()
	if session.err == nil && !session.ending {
		session.renewedAt(sent)
	}
	session.mu.Unlock()
	session.poke()
	return true
}

// Session is one server lease (LOCK.LEASE) that every hold of one ttl
// taken through a Client (on one node, in a cluster) is attached to, kept
// alive by one goroutine with one LOCK.LEASE KEEPALIVE every ttl/3,
// whatever the number of holds. When it ends (revoked, run out on the
// server, or not kept alive in time), every hold attached to it is lost at
// once, each through its own Context, Lost and Err, and the next hold gets
// a new Session. Lock.Session says which a lock is attached to.
type Session struct {
	client *Client
	id     string
	node   string
	ttl    time.Duration

	mu            sync.Mutex
	validUntil    time.Time // sent + ttl of the grant or last successful keepalive
	nextKeepalive time.Time
	holds         map[*Lock]struct{} // attached and not lost or released
	orphans       map[*Lock]struct{} // released, but the release got no answer
	pending       int                // acquires in flight with this lease
	ending        bool               // the server said the lease is gone: the holds are being asked why
	err           *LostError         // why it ended; nil while live
	done          chan struct{}      // closed once it ended, after every hold was told
	wake          chan struct{}      // something changed: the keeper looks again
}

// ID is the lease's id, as LOCK.LEASE GRANT answered it. A secret like a
// token: whoever knows it keeps every hold of the session alive, or
// revokes them all (LOCK.LEASE REVOKE). Never log it.
func (s *Session) ID() string { return s.id }

// TTL is the lease's ttl: its holds live until it is not kept alive for
// that long.
func (s *Session) TTL() time.Duration { return s.ttl }

// Holds is the number of holds attached now.
func (s *Session) Holds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.holds)
}

// ValidUntil is the end of the lease on the client's clock: the send of the
// grant or the last successful keepalive, plus the ttl.
func (s *Session) ValidUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil
}

// Done is closed once the session has ended, after every hold attached to
// it was told.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives; once it ended, a *LostError saying
// why: LostExpired (not kept alive in time, or unused past its deadline),
// LostRefused (the server no longer had the lease) or LostRevoked
// (LOCK.LEASE REVOKE).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return nil
	}
	return s.err
}

// lostAt is when the session is declared ended without a successful
// keepalive. s.mu is held.
func (s *Session) lostAt() time.Time {
	return s.validUntil.Add(-time.Duration(float64(s.ttl) * s.client.margin))
}

// enter counts an acquire in flight, if the session is live and its term
// not run out.
func (s *Session) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.ending || !time.Now().Before(s.lostAt()) {
		return false
	}
	s.pending++
	s.poke()
	return true
}

// leave: an acquire counted by enter (or join) is done.
func (s *Session) leave() {
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
	s.poke()
}

// attach adds a hold just granted with this lease; the loss when the
// session ended (or is ending) before the reply came.
func (s *Session) attach(l *Lock) *LostError {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		lost := *s.err
		return &lost
	case s.ending:
		return &LostError{Reason: LostRefused}
	case !time.Now().Before(s.lostAt()):
		return &LostError{Reason: LostExpired}
	}
	s.holds[l] = struct{}{}
	s.poke()
	return nil
}

// detach removes a hold (released, or lost on its own).
func (s *Session) detach(l *Lock) {
	s.mu.Lock()
	delete(s.holds, l)
	s.mu.Unlock()
	s.poke()
}

// released records how a hold's release went: with no answer (err is not
// the server's) the session sends it again with its keepalives.
func (s *Session) released(l *Lock, err error) {
	var reply ServerError
	s.mu.Lock()
	if err != nil && !errors.As(err, &reply) && s.err == nil {
		s.orphans[l] = struct{}{}
	} else {
		delete(s.orphans, l)
	}
	s.mu.Unlock()
	s.poke()
}

// expected is how many holds the server should count: attached, and
// released with no answer; a lock on several keys is a hold per key on the
// server. s.mu is held.
func (s *Session) expected() int {
	n := 0
	for l := range s.holds {
		n += l.req.holds()
	}
	for l := range s.orphans {
		n += l.req.holds()
	}
	return n
}

func (s *Session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// renewedAt moves the clock after a grant or keepalive sent at sent. s.mu
// is held (or the session is not shared yet).
func (s *Session) renewedAt(sent time.Time) {
	if until := sent.Add(s.ttl); until.After(s.validUntil) {
		s.validUntil = until
		s.nextKeepalive = sent.Add(s.ttl / 3)
	}
}

// keep is the session's keeper: a keepalive every ttl/3 while the session
// has holds or acquires in flight, retried after a failure until the
// deadline less the margin, which ends it.
func (s *Session) keep() {
	deadline := time.NewTimer(time.Hour)
	next := time.NewTimer(time.Hour)
	defer deadline.Stop()
	defer next.Stop()
	var rounds chan error // non-nil while a round is in flight
	for {
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			return
		}
		lostAt, nextAt := s.lostAt(), s.nextKeepalive
		due := !s.ending && rounds == nil && s.expected()+s.pending > 0
		s.mu.Unlock()
		reset(deadline, time.Until(lostAt))
		if due {
			reset(next, time.Until(nextAt))
		} else {
			reset(next, time.Hour)
		}
		select {
		case <-s.wake:
		case <-deadline.C:
			if s.expireIfDue() {
				return
			}
		case <-next.C:
			if due {
				rounds = make(chan error, 1)
				go func() { rounds <- s.round(lostAt) }()
			}
		case err := <-rounds:
			rounds = nil
			if err != nil {
				// Try again until the deadline: a reconnect in between costs nothing.
				s.mu.Lock()
				s.nextKeepalive = time.Now().Add(retryDelay(s.ttl))
				s.mu.Unlock()
			}
		}
	}
}

// round is one keepalive, bounded by the deadline less the margin: then
// the count of holds on the server against this client's. An error when
// there was no answer to act on.
func (s *Session) round(lostAt time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), lostAt)
	defer cancel()
	s.mu.Lock()
	before := s.expected()
	s.mu.Unlock()
	sent := time.Now()
	reply, err := s.client.doOn(ctx, s.node, "LOCK.LEASE", "KEEPALIVE", s.id)
	if err != nil {
		return err
	}
	alive, err := replyInt(reply)
	if err != nil {
		return err
	}
	if alive != 1 {
		s.endedByServer()
		return nil
	}
	s.mu.Lock()
	if s.err == nil && !s.ending {
		s.renewedAt(sent)
	}
	s.mu.Unlock()
	s.poke()
	s.releaseOrphans(ctx)
	s.check(ctx, before)
	return nil
}

// releaseOrphans sends again each release that got no answer.
func (s *Session) releaseOrphans(ctx context.Context) {
	s.mu.Lock()
	orphans := make([]*Lock, 0, len(s.orphans))
	for l := range s.orphans {
		orphans = append(orphans, l)
	}
	s.mu.Unlock()
	for _, l := range orphans {
		_, err := s.client.driver.Do(ctx, l.req.releaseArgs()...)
		s.released(l, err)
	}
}

// check compares the server's count of the lease's holds with this
// client's (the smaller of before and after the keepalive, so that a hold
// released meanwhile is not taken for one taken away); fewer on the
// server: each hold is asked.
func (s *Session) check(ctx context.Context, before int) {
	reply, err := s.client.doOn(ctx, s.node, "LOCK.LEASE", "INFO", s.id)
	if err != nil {
		return
	}
	fields, err := replyFields(reply)
	if fields == nil || err != nil {
		return // gone since the keepalive: the next one says so
	}
	onServer, err := replyInt(fields["holds"])
	if err != nil {
		return
	}
	s.mu.Lock()
	here := s.expected()
	s.mu.Unlock()
	if before < here {
		here = before
	}
	if int(onServer) >= here {
		return
	}
	for _, l := range s.members() {
		if lost, err := l.probe(ctx); err == nil && lost != nil {
			l.lose(lost)
		}
	}
}

func (s *Session) members() []*Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	members := make([]*Lock, 0, len(s.holds))
	for l := range s.holds {
		members = append(members, l)
	}
	return members
}

// endedByServer: the server no longer has the lease (a keepalive answered
// 0, an acquire NOLEASE). Every attached hold is lost, each with the reason
// its own extend gives (REVOKED lease revoked after LOCK.LEASE REVOKE, or
// an earlier LOCK.REVOKE's reason), else LostRefused; all of them told
// together once they have answered. Should the answers not come before the
// deadline less the margin, the keeper ends them then, as expired.
func (s *Session) endedByServer() {
	s.mu.Lock()
	if s.err != nil || s.ending {
		s.mu.Unlock()
		return
	}
	s.ending = true
	lostAt := s.lostAt()
	s.mu.Unlock()
	s.poke()
	ctx, cancel := context.WithDeadline(context.Background(), lostAt)
	defer cancel()
	reasons := map[*Lock]*LostError{}
	ended := &LostError{Reason: LostRefused}
	for _, l := range s.members() {
		lost, _ := l.probe(ctx)
		if lost == nil || lost.Reason != LostRevoked {
			lost = &LostError{Reason: LostRefused}
		} else {
			ended = lost
		}
		reasons[l] = lost
	}
	s.end(ended, func(l *Lock) *LostError {
		if lost := reasons[l]; lost != nil {
			return lost
		}
		return &LostError{Reason: LostRefused}
	})
}

// expireIfDue ends the session as expired once its deadline less the
// margin has come with no successful keepalive; true once it has ended.
func (s *Session) expireIfDue() bool {
	s.mu.Lock()
	due := s.err != nil || !time.Now().Before(s.lostAt())
	s.mu.Unlock()
	if due {
		s.end(&LostError{Reason: LostExpired}, func(*Lock) *LostError { return &LostError{Reason: LostExpired} })
	}
	return due
}

// end records why the session ended (once), tells every hold, each with
// reasonOf's loss, then closes Done.
func (s *Session) end(why *LostError, reasonOf func(*Lock) *LostError) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = why
	holds := s.holds
	s.holds = map[*Lock]struct{}{}
	s.orphans = map[*Lock]struct{}{} // the lease's end ends them on the server
	s.mu.Unlock()
	for l := range holds {
		l.lose(reasonOf(l))
	}
	close(s.done)
	s.poke()
}
