package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// leaseHolds is LOCK.LEASE INFO id's count of attached holds (-1: gone).
func leaseHolds(s *server, id string) int64 {
	s.t.Helper()
	reply, _ := redis.Values(s.do("LOCK.LEASE", "INFO", id), nil)
	for i := 0; i+1 < len(reply); i += 2 {
		if name, _ := redis.String(reply[i], nil); name == "holds" {
			n, _ := redis.Int64(reply[i+1], nil)
			return n
		}
	}
	return -1
}

// told says whether every lock's loss was signalled already.
func told(locks []*redislock.Lock) bool {
	for _, lock := range locks {
		select {
		case <-lock.Lost():
		default:
			return false
		}
	}
	return true
}

func TestManyHoldsShareOneLeaseAndOneKeepalive(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	const ttl = 300 * time.Millisecond
	var held []*redislock.Lock
	for i := 0; i < 10; i++ {
		lock, err := locks.Obtain(bg(), fmt.Sprintf("job:%d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lock)
	}
	for i := 0; i < 2; i++ {
		reader, err := locks.Obtain(bg(), "catalog", ttl, redislock.Shared())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, reader)
	}
	permits, err := locks.Semaphore("renders", 3).Acquire(bg(), ttl, redislock.Count(2))
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, permits)
	session := held[0].Session()
	for _, lock := range held {
		if lock.Session() == nil || lock.Session() != session {
			t.Fatal("every hold of one client and ttl is attached to one session")
		}
	}
	if session.Holds() != len(held) || session.TTL() != ttl || leaseHolds(s, session.ID()) != int64(len(held)) {
		t.Fatalf("the session has %d holds, the server's lease %d; want %d", session.Holds(), leaseHolds(s, session.ID()), len(held))
	}
	if n := s.Counter("lock", "lock_leases"); n != 1 {
		t.Fatalf("INFO lock: lock_leases:%d, want 1", n)
	}
	time.Sleep(time.Second) // more than three ttls
	for _, lock := range held {
		if lock.Err() != nil {
			t.Fatalf("the session must keep every hold: %v", lock.Err())
		}
	}
	if s.info("job:9")["fence"] != held[9].Fence() {
		t.Fatal("the lock is no longer held")
	}
	// One keepalive per round for all of them, and no extend of any.
	if keepalives := s.Counter("lock", "lock_keepalives"); keepalives < 2 || keepalives > 20 {
		t.Fatalf("%d keepalives in a second, for a ttl of %v", keepalives, ttl)
	}
	if n := s.calls("lock.extend") + s.calls("sem.extend"); n != 0 {
		t.Fatalf("%d extends: an attached hold is never extended on its own", n)
	}
	for _, lock := range held {
		if err := lock.Release(bg()); err != nil {
			t.Fatal(err)
		}
	}
	if session.Holds() != 0 || session.Err() != nil {
		t.Fatalf("released: %d holds left, %v", session.Holds(), session.Err())
	}
}

func TestRevokeTellsTheHolderWhyWithTheReason(t *testing.T) {
	t.Parallel()
	for _, mode := range []redislock.KeepAlive{redislock.KeepAliveAuto, redislock.KeepAliveWatchdog} {
		mode := mode
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			locks := s.client(redislock.WithKeepAlive(mode))
			lock, err := locks.Obtain(bg(), "job", 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			other, err := locks.Obtain(bg(), "other", 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := locks.Revoke(bg(), "job", "stuck since 03:00, OPS-12"); err != nil || n != 1 {
				t.Fatalf("Revoke: %d, %v", n, err)
			}
			within(t, "the holder learns it", lock.Lost())
			var lost *redislock.LostError
			if !errors.As(lock.Err(), &lost) || lost.Reason != redislock.LostRevoked || lost.Revoked != "stuck since 03:00, OPS-12" {
				t.Fatalf("want LostRevoked with the reason, got %#v", lock.Err())
			}
			if !errors.Is(lock.Err(), redislock.ErrRevoked) || !errors.Is(lock.Err(), redislock.ErrNotHeld) || !errors.Is(lock.Err(), redislock.ErrLost) {
				t.Fatalf("a revoked lock is ErrRevoked, ErrNotHeld and ErrLost: %v", lock.Err())
			}
			if !strings.Contains(lock.Err().Error(), "stuck since 03:00") || strings.Contains(lock.Err().Error(), lock.Token()) {
				t.Fatalf("the error says the reason, never the token: %v", lock.Err())
			}
			if other.Err() != nil {
				t.Fatalf("another hold is not revoked: %v", other.Err())
			}
			if n, _ := locks.Revoke(bg(), "job", ""); n != 0 {
				t.Fatalf("revoking a free key ended %d holds", n)
			}
		})
	}
}

func TestRevokedGuardAndRefresh(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	lock, err := locks.Obtain(bg(), "{billing}:lock", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Refresh(bg(), 10*time.Second); err != nil || lock.Session() == nil {
		t.Fatalf("an attached lock's Refresh checks it holds: %v", err)
	}
	if n, err := locks.Revoke(bg(), "{billing}:lock", ""); err != nil || n != 1 {
		t.Fatalf("Revoke: %d, %v", n, err)
	}
	_, err = lock.Guard(bg(), "INCRBY", "{billing}:total", 100)
	var lost *redislock.LostError
	if !errors.As(err, &lost) || lost.Reason != redislock.LostRevoked || lost.Revoked != "revoked by an operator" {
		t.Fatalf("a revoked holder's guarded write: want LostRevoked with the default reason, got %v", err)
	}
	within(t, "the guard's REVOKED marks the lock lost", lock.Lost())
	if s.do("GET", "{billing}:total") != nil {
		t.Fatal("the revoked holder's guarded write landed")
	}
	second, err := locks.Obtain(bg(), "{billing}:lock", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.Revoke(bg(), "{billing}:lock", "maintenance"); err != nil {
		t.Fatal(err)
	}
	if err := second.Refresh(bg(), time.Second); !errors.Is(err, redislock.ErrRevoked) || !strings.HasSuffix(err.Error(), "maintenance") {
		t.Fatalf("Refresh of a revoked lock: want ErrRevoked, got %v", err)
	}
	if _, err := locks.Revoke(bg(), "k", strings.Repeat("x", redislock.MaxReasonBytes+1)); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("a reason of 129 bytes: want ErrInvalidArgument, got %v", err)
	}
}

func TestRevokedLeaseEndsEveryHoldAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	var held []*redislock.Lock
	for i := 0; i < 5; i++ {
		lock, err := locks.Obtain(bg(), fmt.Sprintf("job:%d", i), 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lock)
	}
	session := held[0].Session()
	if n, _ := redis.Int(s.do("LOCK.LEASE", "REVOKE", session.ID()), nil); n != 5 {
		t.Fatalf("LOCK.LEASE REVOKE ended %d holds", n)
	}
	within(t, "the session ends", session.Done())
	if !told(held) {
		t.Fatal("every hold is told before the session is done")
	}
	for _, lock := range held {
		var lost *redislock.LostError
		if !errors.As(lock.Err(), &lost) || lost.Reason != redislock.LostRevoked || lost.Revoked != "lease revoked" {
			t.Fatalf("want LostRevoked (lease revoked), got %v", lock.Err())
		}
	}
	if !errors.Is(session.Err(), redislock.ErrRevoked) {
		t.Fatalf("the session ended revoked, not %v", session.Err())
	}
	// The next hold gets a new lease.
	next, err := locks.Obtain(bg(), "job:0", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if next.Session() == session || next.Session() == nil || s.Counter("lock", "lock_leases_granted") != 2 {
		t.Fatal("a new lease for the next hold")
	}
	if err := next.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

// dropKeepalives makes every LOCK.LEASE KEEPALIVE fail unsent, as on a
// network that lost the server.
type dropKeepalives struct{ redislock.Driver }

func (d dropKeepalives) Do(ctx context.Context, args ...interface{}) (interface{}, error) {
	if args[0] == "LOCK.LEASE" && args[1] == "KEEPALIVE" {
		return nil, errNetwork
	}
	return d.Driver.Do(ctx, args...)
}

func TestFailedKeepalivesEndEveryHoldAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := redislock.New(dropKeepalives{redislock.NewRedigo(s.pool())})
	var held []*redislock.Lock
	for i := 0; i < 3; i++ {
		lock, err := locks.Obtain(bg(), fmt.Sprintf("job:%d", i), 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lock)
	}
	within(t, "the session expires", held[0].Session().Done())
	if !told(held) {
		t.Fatal("every hold is told before the session is done")
	}
	for _, lock := range held {
		var lost *redislock.LostError
		if !errors.As(lock.Err(), &lost) || lost.Reason != redislock.LostExpired || errors.Is(lock.Err(), redislock.ErrNotHeld) {
			t.Fatalf("want LostExpired, got %v", lock.Err())
		}
	}
}

func TestNoLeaseGrantsANewLeaseOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	first, err := locks.Obtain(bg(), "a", 10*time.Second) // the next keepalive is 3 s away
	if err != nil {
		t.Fatal(err)
	}
	session := first.Session()
	s.do("LOCK.LEASE", "REVOKE", session.ID())
	// The client does not know yet: the acquire names the revoked lease.
	second, err := locks.Obtain(bg(), "b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.errors("NOLEASE") != 1 {
		t.Fatal("the acquire was not answered NOLEASE: the test proves nothing")
	}
	if second.Session() == session || s.Counter("lock", "lock_leases_granted") != 2 || s.info("b")["fence"] != second.Fence() {
		t.Fatal("after NOLEASE, the acquire is sent again with a new lease")
	}
	within(t, "the old session's hold is lost", first.Lost())
	if !errors.Is(first.Err(), redislock.ErrRevoked) {
		t.Fatalf("want revoked, got %v", first.Err())
	}
	if err := second.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestAReleaseWithNoAnswerIsSentAgainByTheSession(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var failed atomic.Bool
	driver := &faulty{Driver: redislock.NewRedigo(s.pool())}
	driver.lose = func(args []interface{}) (bool, bool) {
		return args[0] == "LOCK.RELEASE" && failed.CompareAndSwap(false, true), false
	}
	locks := redislock.New(driver)
	lock, err := locks.Obtain(bg(), "job", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(bg()); !errors.Is(err, errNetwork) {
		t.Fatalf("want the network error, got %v", err)
	}
	if s.info("job")["fence"] != lock.Fence() {
		t.Fatal("the release did not reach the server: the test proves nothing")
	}
	// Not called again: the session's next keepalive sends it.
	eventually(t, "the session releases it", func() bool { return s.info("job") == nil })
	if s.Counter("lock", "lock_leases_granted") != 1 || driver.hits.Load() != 1 {
		t.Fatal("one lease, one failed release")
	}
}

func TestAutoFallsBackToWatchdogsWithoutLockLease(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.do("ACL", "SETUSER", "nolease", "on", "nopass", "~*", "+@all", "-lock.lease")
	pool := &redis.Pool{Dial: func() (redis.Conn, error) {
		return redis.Dial("tcp", s.Addr(), redis.DialUsername("nolease"), redis.DialPassword("x"), redis.DialReadTimeout(2*time.Second))
	}}
	defer pool.Close()
	lock, err := redislock.New(redislock.NewRedigo(pool)).Obtain(bg(), "job", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if lock.Session() != nil {
		t.Fatal("without LOCK.LEASE, the lock has a watchdog")
	}
	eventually(t, "the watchdog extends", func() bool { return s.info("job")["extends"] >= 1 })
	if err := lock.Release(bg()); err != nil {
		t.Fatal(err)
	}
	_, err = redislock.New(redislock.NewRedigo(pool), redislock.WithKeepAlive(redislock.KeepAliveSession)).Obtain(bg(), "job", time.Second)
	var serverErr redislock.ServerError
	if !errors.As(err, &serverErr) || serverErr.Code() != "NOPERM" {
		t.Fatalf("KeepAliveSession without LOCK.LEASE: want the server's NOPERM, got %v", err)
	}
}

// TestCostOfKeepingHoldsAlive measures what keeping 1,000 holds alive for
// two ttls costs, with the session and with a watchdog per lock: the server
// calls per second, the client's goroutines and the connections it opened
// (the figures of docs/clients/go.md). About 15 s: run it with
//
//	LOCK_MEASURE=1 go test -run TestCostOfKeepingHoldsAlive -v
func TestCostOfKeepingHoldsAlive(t *testing.T) {
	if os.Getenv("LOCK_MEASURE") == "" {
		t.Skip("set LOCK_MEASURE=1 to measure")
	}
	const holds, ttl = 1000, 3 * time.Second
	perSecond := map[redislock.KeepAlive]float64{}
	for _, mode := range []redislock.KeepAlive{redislock.KeepAliveSession, redislock.KeepAliveWatchdog} {
		s := startServer(t)
		locks := s.client(redislock.WithKeepAlive(mode))
		goroutines := runtime.NumGoroutine()
		var held []*redislock.Lock
		for i := 0; i < holds; i++ {
			lock, err := locks.Obtain(bg(), fmt.Sprintf("job:%d", i), ttl)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, lock)
		}
		kept := func() int64 {
			return s.calls("lock.extend") + s.calls("lock.lease|keepalive") + s.calls("lock.lease|info")
		}
		// Each look from here opens a connection of its own: not counted.
		calls, connections := kept(), s.Counter("stats", "total_connections_received")
		started := time.Now()
		time.Sleep(2 * ttl)
		elapsed := time.Since(started).Seconds()
		opened := s.Counter("stats", "total_connections_received") - connections - 1
		perSecond[mode] = float64(kept()-calls) / elapsed
		t.Logf("%s: %d holds of %v for %.1f s: %.1f server calls/s to keep them alive, %d goroutines, %d connections opened",
			mode, holds, ttl, elapsed, perSecond[mode], runtime.NumGoroutine()-goroutines, opened)
		for _, lock := range held {
			if lock.Err() != nil {
				t.Fatal(lock.Err())
			}
			if err := lock.Release(bg()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if perSecond[redislock.KeepAliveSession]*100 > perSecond[redislock.KeepAliveWatchdog] {
		t.Fatalf("the session costs more than a hundredth of the watchdogs: %v", perSecond)
	}
}
