package redislock_test

// A held lock key overwritten with another type (SET k v): every command
// on it then answers WRONGTYPE, which says the lock is gone as surely as a
// LOST does. The holder must hear it as a refusal (LostRefused, as for a
// DEL), at the next keepalive or extend, not as an expiry at the deadline
// nor never.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

func TestLostWhenTheKeyIsOverwritten(t *testing.T) {
	t.Parallel()
	for _, mode := range []redislock.KeepAlive{redislock.KeepAliveSession, redislock.KeepAliveWatchdog} {
		mode := mode
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			const ttl = 3 * time.Second
			lock, err := s.client(redislock.WithKeepAlive(mode)).Obtain(bg(), "job", ttl)
			if err != nil {
				t.Fatal(err)
			}
			if (lock.Session() != nil) != (mode == redislock.KeepAliveSession) {
				t.Fatalf("%v: session %v", mode, lock.Session())
			}
			s.do("SET", "job", "v")
			overwritten := time.Now()
			within(t, "the overwrite is noticed", lock.Lost())
			took := time.Since(overwritten)
			t.Logf("%v: lost %v after the overwrite (ttl %v)", mode, took.Round(time.Millisecond), ttl)
			var lost *redislock.LostError
			if !errors.As(lock.Err(), &lost) || lost.Reason != redislock.LostRefused {
				t.Fatalf("want LostRefused, got %#v", lock.Err())
			}
			if !errors.Is(lock.Err(), redislock.ErrNotHeld) || lock.Context().Err() == nil {
				t.Fatalf("a refused loss is ErrNotHeld and cancels the context: %v", lock.Context().Err())
			}
			// Noticed at the next keepalive (ttl/3), as a DEL is: well
			// within the ttl, with room for a slow machine.
			if took > ttl+2*time.Second {
				t.Fatalf("lost %v after the overwrite: want within the ttl (%v)", took, ttl)
			}
			if err := lock.Release(bg()); !errors.Is(err, redislock.ErrNotHeld) {
				t.Fatalf("Release after the overwrite: want ErrNotHeld, got %v", err)
			}
			if got, _ := redis.String(s.do("GET", "job"), nil); got != "v" {
				t.Fatalf("the overwriting value must stay: %q", got)
			}
		})
	}
}

func TestGuardAndReleaseAfterAnOverwrite(t *testing.T) {
	t.Parallel()
	for _, mode := range []redislock.KeepAlive{redislock.KeepAliveSession, redislock.KeepAliveWatchdog} {
		mode := mode
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			locks := s.client(redislock.WithKeepAlive(mode))
			lock, err := locks.Obtain(bg(), "{billing}:lock", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// The guarded command's own WRONGTYPE keeps the lock.
			s.do("SET", "{billing}:list", "x")
			var reply redislock.ServerError
			if _, err := lock.Guard(bg(), "LPUSH", "{billing}:list", "y"); !errors.As(err, &reply) || reply.Code() != "WRONGTYPE" || lock.Err() != nil {
				t.Fatalf("the command's own WRONGTYPE: %v (lock: %v)", err, lock.Err())
			}
			s.do("SET", "{billing}:lock", "v")
			_, err = lock.Guard(bg(), "INCR", "{billing}:total")
			var lost *redislock.LostError
			if !errors.As(err, &lost) || lost.Reason != redislock.LostRefused || !errors.Is(err, redislock.ErrNotHeld) {
				t.Fatalf("Guard on the overwritten lock key: want LostRefused, got %#v", err)
			}
			within(t, "Guard marks the lock lost", lock.Lost())
			if n, _ := redis.Int64(s.do("EXISTS", "{billing}:total"), nil); n != 0 {
				t.Fatal("the guarded command ran")
			}
			if err := lock.Release(bg()); !errors.Is(err, redislock.ErrNotHeld) {
				t.Fatalf("Release after the overwrite: want ErrNotHeld, got %v", err)
			}
			// Release before any loss was noticed (no keepalive yet).
			other, err := locks.Obtain(bg(), "other", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			s.do("SET", "other", "v")
			if err := other.Release(bg()); !errors.Is(err, redislock.ErrNotHeld) {
				t.Fatalf("Release of an overwritten lock: want ErrNotHeld, got %v", err)
			}
			// A semaphore's permits too.
			permits, err := locks.Semaphore("renders", 2).Acquire(bg(), 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			s.do("SET", "renders", "v")
			if err := permits.Release(bg()); !errors.Is(err, redislock.ErrNotHeld) {
				t.Fatalf("SEM.RELEASE of overwritten permits: want ErrNotHeld, got %v", err)
			}
		})
	}
}

func TestWithLockReportsAnOverwriteAsALoss(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	err := s.client().WithLock(bg(), "job", 30*time.Second, func(_ context.Context, _ *redislock.Lock) error {
		s.do("SET", "job", "v")
		return nil
	})
	if !errors.Is(err, redislock.ErrLost) || !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("WithLock whose key was overwritten: want a refused loss, got %v", err)
	}
}
