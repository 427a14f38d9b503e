package redislock_test

// Every call the package makes on its own is bounded, also over a redigo
// pool whose Dial takes no context and sets no connect timeout.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// hangingDials is a pool with Dial (no context) whose first `working`
// dials connect and every later one hangs until the test ends: a server
// that stopped answering new connections.
func hangingDials(t *testing.T, s *server, working int32) (*redis.Pool, *atomic.Int32) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var dials atomic.Int32
	pool := &redis.Pool{MaxIdle: 4, Dial: func() (redis.Conn, error) {
		if dials.Add(1) > working {
			<-release
			return nil, errors.New("the test ended")
		}
		return redis.Dial("tcp", s.Addr(), redis.DialReadTimeout(2*time.Second))
	}}
	t.Cleanup(func() { pool.Close() })
	return pool, &dials
}

func TestAWaitsDialIsBoundedByTheContext(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	pool, dials := hangingDials(t, s, 1)
	locks := redislock.New(redislock.NewRedigo(pool))
	ctx, cancel := context.WithTimeout(bg(), 300*time.Millisecond)
	defer cancel()
	started := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := locks.Obtain(ctx, "job", 10*time.Second, redislock.Wait(10*time.Second))
		done <- err
	}()
	err := within(t, "Obtain with Wait returns once its context is done, though its dial hangs", done)
	t.Logf("returned after %v (context 300ms), %d dials", time.Since(started).Round(time.Millisecond), dials.Load())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's deadline, got %v", err)
	}
}

func TestAnObserverWhoseDialHangsReportsAndRetries(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	pool, _ := hangingDials(t, s, 0)
	election := redislock.New(redislock.NewRedigo(pool)).Election("leader", time.Second)
	ctx, cancel := context.WithCancel(bg()) // no deadline: the package bounds the dial itself
	defer cancel()
	observed := election.Observe(ctx)
	got := make(chan redislock.Observation, 1)
	go func() { got <- <-observed }()
	// The dial is given up after a bounded while (5 s), reported, and retried.
	select {
	case o := <-got:
		if o.Err == nil {
			t.Fatalf("want the dial's error, got %+v", o)
		}
		t.Logf("reported: %v", o.Err)
	case <-time.After(30 * time.Second):
		t.Fatal("not within 30 s: the observer's hung dial is reported")
	}
}
