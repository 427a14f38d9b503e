package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

func TestObtainRefreshRelease(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	lock, err := locks.Obtain(bg(), "billing", 10*time.Second, redislock.Owner("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !isUUIDv4(lock.Token()) {
		t.Fatalf("the token is not a UUIDv4 drawn by the client: %q", lock.Token())
	}
	info, err := locks.Info(bg(), "billing")
	if err != nil || info == nil || info.Fence != lock.Fence() || info.Owner != "worker-1" || info.TTL <= 0 || info.Lease == 0 {
		t.Fatalf("LOCK.INFO: %+v, %v (fence %d)", info, err, lock.Fence())
	}
	// The server holds the lock under the client's token (TOKEN was sent).
	if n, err := redis.Int(s.do("LOCK.EXTEND", "billing", lock.Token(), 10000), nil); err != nil || n != 1 {
		t.Fatalf("LOCK.EXTEND with the client's token: %v %v", n, err)
	}
	if _, err := locks.Obtain(bg(), "billing", time.Second); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("a held lock: want ErrNotObtained, got %v", err)
	}
	if err := lock.Refresh(bg(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := redis.Int64(s.do("PTTL", "billing"), nil); ttl <= 10000 {
		t.Fatalf("Refresh(20s): PTTL %d", ttl)
	}
	if err := lock.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if s.info("billing") != nil {
		t.Fatal("released, but the key is still held")
	}
	select {
	case <-lock.Context().Done():
	default:
		t.Fatal("Release must cancel the lock's context")
	}
	if lock.Err() != nil {
		t.Fatalf("a released lock is not lost: %v", lock.Err())
	}
	if err := lock.Release(bg()); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("a second Release: want ErrNotHeld, got %v", err)
	}
	next, err := locks.Obtain(bg(), "billing", time.Second)
	if err != nil || next.Fence() <= lock.Fence() {
		t.Fatalf("the next holder's fence must be larger: %v, %v", next, err)
	}
}

func TestWatchdogKeepsTheLockPastItsTTL(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	lock, err := s.client(redislock.WithKeepAlive(redislock.KeepAliveWatchdog)).Obtain(bg(), "job", 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if lock.Session() != nil {
		t.Fatal("KeepAliveWatchdog: the lock has a watchdog, not a session")
	}
	time.Sleep(2 * time.Second) // more than three ttls
	if lock.Err() != nil || s.info("job")["fence"] != lock.Fence() {
		t.Fatalf("the watchdog must keep the lock: %v, %v", lock.Err(), s.info("job"))
	}
	if s.info("job")["extends"] < 2 {
		t.Fatalf("the watchdog extended %d times", s.info("job")["extends"])
	}
	if err := lock.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestLostOnExpiryWithoutWatchdog(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	lock, err := s.client().Obtain(bg(), "job", 300*time.Millisecond, redislock.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	within(t, "the context is cancelled at the deadline", lock.Context().Done())
	var lost *redislock.LostError
	if !errors.As(lock.Err(), &lost) || lost.Reason != redislock.LostExpired || !errors.Is(lock.Err(), redislock.ErrLost) {
		t.Fatalf("want LostExpired, got %v", lock.Err())
	}
	select {
	case <-lock.Lost():
	default:
		t.Fatal("Lost must be closed")
	}
}

func TestLostWhenTheKeyIsDeleted(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	lock, err := s.client().Obtain(bg(), "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.do("DEL", "job")
	within(t, "the watchdog's extend is refused", lock.Lost())
	if !errors.Is(lock.Err(), redislock.ErrNotHeld) || !errors.Is(lock.Err(), redislock.ErrLost) {
		t.Fatalf("want a refused loss, got %v", lock.Err())
	}
	if lock.Context().Err() == nil {
		t.Fatal("the context must be cancelled")
	}
}

func TestLostWhenTheServerGoesAway(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"killed", "paused"} {
		t.Run(how, func(t *testing.T) {
			s := startServer(t)
			lock, err := s.client().Obtain(bg(), "job", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if how == "killed" {
				s.kill()
			} else {
				s.pause() // extends hang: the deadline still comes
			}
			within(t, "the lock is declared lost", lock.Context().Done())
			var lost *redislock.LostError
			if !errors.As(lock.Err(), &lost) || lost.Reason != redislock.LostExpired {
				t.Fatalf("want LostExpired, got %v", lock.Err())
			}
			if errors.Is(lock.Err(), redislock.ErrNotHeld) {
				t.Fatal("the server said nothing: not ErrNotHeld")
			}
		})
	}
}

func TestGuard(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	lock, err := s.client().Obtain(bg(), "{billing}:lock", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	total, err := redis.Int64(lock.Guard(bg(), "INCRBY", "{billing}:total", 6000))
	if err != nil || total != 6000 {
		t.Fatalf("guarded INCRBY: %v %v", total, err)
	}
	if _, err := lock.Guard(bg(), "BLPOP", "{billing}:list", 1); err == nil || errors.Is(err, redislock.ErrLost) {
		t.Fatalf("a refused command is the server's error and keeps the lock: %v", err)
	}
	var serverErr redislock.ServerError
	if _, err := lock.Guard(bg(), "LPUSH", "{billing}:total", "x"); !errors.As(err, &serverErr) || serverErr.Code() != "WRONGTYPE" || lock.Err() != nil {
		t.Fatalf("the command's own error: %v (lock: %v)", err, lock.Err())
	}
	s.do("DEL", "{billing}:lock")
	_, err = lock.Guard(bg(), "INCRBY", "{billing}:total", 999999)
	if !errors.Is(err, redislock.ErrLost) || !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("a guarded write after the loss: want ErrLost, got %v", err)
	}
	if strings.Contains(err.Error(), lock.Token()) {
		t.Fatal("the error names the token")
	}
	within(t, "Guard's LOST marks the lock lost", lock.Lost())
	if got, _ := redis.Int64(s.do("GET", "{billing}:total"), nil); got != 6000 {
		t.Fatalf("the refused write changed the total: %d", got)
	}
}

func TestWaitIsHandedTheLockAndPinsIt(t *testing.T) {
	t.Parallel()
	for _, mode := range []redislock.KeepAlive{redislock.KeepAliveAuto, redislock.KeepAliveWatchdog} {
		mode := mode
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			t.Parallel()
			waitIsHandedTheLock(t, mode)
		})
	}
}

func waitIsHandedTheLock(t *testing.T, mode redislock.KeepAlive) {
	s := startServer(t)
	locks := s.client(redislock.WithKeepAlive(mode))
	holder, err := locks.Obtain(bg(), "job", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *redislock.Lock, 1)
	go func() {
		lock, err := locks.Obtain(bg(), "job", 10*time.Second, redislock.Wait(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- lock
	}()
	eventually(t, "the waiter queues", func() bool { return s.queued("job") == 1 })
	if err := holder.Release(bg()); err != nil {
		t.Fatal(err)
	}
	waiter := within(t, "the waiter is handed the lock", got)
	if waiter == nil || waiter.Fence() <= holder.Fence() {
		t.Fatalf("the waiter's fence must be larger than the holder's: %v", waiter)
	}
	info := s.info("job")
	if mode == redislock.KeepAliveWatchdog {
		// One extend right after the grant pins the lease to a known send time.
		if info["fence"] != waiter.Fence() || info["extends"] < 1 {
			t.Fatalf("no extend after the WAIT grant: %v", info)
		}
	} else if info["fence"] != waiter.Fence() || info["lease"] == 0 || waiter.Session() != holder.Session() {
		// Attached to the session, which was kept alive while it waited.
		t.Fatalf("the waiter is not attached to the client's session: %v", info)
	}
	if err := waiter.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestWaitRunsOut(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	if _, err := locks.Obtain(bg(), "job", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err := locks.Obtain(bg(), "job", time.Second, redislock.Wait(200*time.Millisecond))
	if !errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait ran out: want ErrNotObtained alone, got %v", err)
	}
	ctx, cancel := context.WithTimeout(bg(), 300*time.Millisecond)
	defer cancel()
	_, err = locks.Obtain(ctx, "job", time.Second, redislock.Wait(time.Minute))
	if !errors.Is(err, redislock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the context's deadline bounds the wait: want ErrNotObtained and DeadlineExceeded, got %v", err)
	}
	if s.queued("job") != 0 {
		t.Fatal("a waiter is left in the queue")
	}
}

func TestCancelledWaitLeavesTheQueue(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	holder, err := locks.Obtain(bg(), "job", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg())
	errs := make(chan error, 1)
	go func() {
		_, err := locks.Obtain(ctx, "job", 10*time.Second, redislock.Wait(time.Minute))
		errs <- err
	}()
	eventually(t, "the waiter queues", func() bool { return s.queued("job") == 1 })
	cancel()
	if err := within(t, "the cancelled Obtain returns", errs); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	eventually(t, "the waiter leaves the queue", func() bool { return s.queued("job") == 0 })
	if err := holder.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if s.info("job") != nil {
		t.Fatal("the lock went to a waiter that had gone")
	}
}

// faulty wraps a Driver: lose makes the next command matching it fail as a
// network error would, after (sent) or before it reaches the server.
type faulty struct {
	redislock.Driver
	lose func(args []interface{}) (bool, bool) // (fail, sent)
	hits atomic.Int32
}

var errNetwork = errors.New("connection reset by peer (injected)")

func (f *faulty) Do(ctx context.Context, args ...interface{}) (interface{}, error) {
	if f.lose != nil {
		if fail, sent := f.lose(args); fail {
			f.hits.Add(1)
			if sent {
				_, _ = f.Driver.Do(ctx, args...)
			}
			return nil, errNetwork
		}
	}
	return f.Driver.Do(ctx, args...)
}

func TestObtainReleasesAfterALostReply(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	driver := &faulty{Driver: redislock.NewRedigo(s.pool())}
	driver.lose = func(args []interface{}) (bool, bool) { return args[0] == "LOCK.ACQUIRE", true }
	_, err := redislock.New(driver).Obtain(bg(), "job", 10*time.Second)
	if !errors.Is(err, errNetwork) || driver.hits.Load() != 1 {
		t.Fatalf("want the network error, got %v", err)
	}
	if s.info("job") != nil {
		t.Fatal("the lock granted under the lost reply must be released with the token")
	}
}

func TestReleaseRetriesAfterANetworkError(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	lock, err := s.client().Obtain(bg(), "job", 10*time.Second, redislock.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	// The pool's idle connection dies: the first release fails on it.
	s.do("CLIENT", "KILL", "TYPE", "normal")
	err = lock.Release(bg())
	if err == nil || errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("the first release must fail with the network error, got %v", err)
	}
	if s.info("job")["fence"] != lock.Fence() {
		t.Fatal("the failed release must not have released")
	}
	if err := lock.Release(bg()); err != nil {
		t.Fatalf("the retry must send the release again: %v", err)
	}
	if s.info("job") != nil {
		t.Fatal("the retried release did not release")
	}
}

func TestWithLock(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	var fence int64
	err := locks.WithLock(bg(), "job", 10*time.Second, func(ctx context.Context, lock *redislock.Lock) error {
		fence = lock.Fence()
		if err := locks.WithLock(ctx, "job", time.Second, func(context.Context, *redislock.Lock) error { return nil }); !errors.Is(err, redislock.ErrNotObtained) {
			t.Errorf("nested: want ErrNotObtained, got %v", err)
		}
		return nil
	})
	if err != nil || fence == 0 || s.info("job") != nil {
		t.Fatalf("WithLock: %v, fence %d, left %v", err, fence, s.info("job"))
	}
	err = locks.WithLock(bg(), "job", time.Second, func(ctx context.Context, lock *redislock.Lock) error {
		s.do("DEL", "job")
		within(t, "the work's context is cancelled on loss", ctx.Done())
		return nil
	})
	if !errors.Is(err, redislock.ErrLost) {
		t.Fatalf("WithLock after a loss: want ErrLost, got %v", err)
	}
	mine := errors.New("the work failed")
	if err := locks.WithLock(bg(), "job", time.Second, func(context.Context, *redislock.Lock) error { return mine }); err != mine || s.info("job") != nil {
		t.Fatalf("WithLock returns the work's error and releases: %v", err)
	}
}

func TestInvalidArgumentsSendNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	for name, call := range map[string]func() error{
		"ttl 0":     func() error { _, err := locks.Obtain(bg(), "k", 0); return err },
		"empty key": func() error { _, err := locks.Obtain(bg(), "", time.Second); return err },
		"wait too long": func() error {
			_, err := locks.Obtain(bg(), "k", time.Second, redislock.Wait(redislock.MaxWait+time.Hour))
			return err
		},
		"empty owner":   func() error { _, err := locks.Obtain(bg(), "k", time.Second, redislock.Owner("")); return err },
		"count on lock": func() error { _, err := locks.Obtain(bg(), "k", time.Second, redislock.Count(2)); return err },
		"limit 0":       func() error { _, err := locks.Semaphore("s", 0).Acquire(bg(), time.Second); return err },
		"count > limit": func() error {
			_, err := locks.Semaphore("s", 2).Acquire(bg(), time.Second, redislock.Count(3))
			return err
		},
		"shared permits": func() error {
			_, err := locks.Semaphore("s", 2).Acquire(bg(), time.Second, redislock.Shared())
			return err
		},
	} {
		if err := call(); !errors.Is(err, redislock.ErrInvalidArgument) {
			t.Errorf("%s: want ErrInvalidArgument, got %v", name, err)
		}
	}
	if n, _ := redis.Int(s.do("DBSIZE"), nil); n != 0 {
		t.Fatalf("a refused argument reached the server: %d keys", n)
	}
}
