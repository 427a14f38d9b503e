package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

func TestSharedLocks(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	first, err := locks.Obtain(bg(), "catalog", 10*time.Second, redislock.Shared())
	if err != nil {
		t.Fatal(err)
	}
	second, err := locks.Obtain(bg(), "catalog", 10*time.Second, redislock.Shared())
	if err != nil {
		t.Fatal(err)
	}
	if !first.Shared() || second.Fence() <= first.Fence() || first.Token() == second.Token() {
		t.Fatal("each reader has its own token and fence")
	}
	info, err := locks.Info(bg(), "catalog")
	if err != nil || info == nil || !info.Shared || info.Holders != 2 {
		t.Fatalf("LOCK.INFO of two readers: %+v %v", info, err)
	}
	if _, err := locks.Obtain(bg(), "catalog", time.Second); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("a writer beside readers: want ErrNotObtained, got %v", err)
	}
	if _, err := first.Guard(bg(), "SET", "catalog:items", "13"); err == nil || errors.Is(err, redislock.ErrLost) {
		t.Fatalf("a reader's guarded write is the server's error, and keeps the lock: %v", err)
	}
	writer := make(chan *redislock.Lock, 1)
	go func() {
		lock, err := locks.Obtain(bg(), "catalog", 10*time.Second, redislock.Wait(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		writer <- lock
	}()
	eventually(t, "the writer queues", func() bool { return s.queued("catalog") == 1 })
	if _, err := locks.Obtain(bg(), "catalog", time.Second, redislock.Shared()); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("a reader behind a queued writer: want ErrNotObtained, got %v", err)
	}
	if err := first.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if s.queued("catalog") != 1 {
		t.Fatal("one reader left: the writer still waits")
	}
	if err := second.Release(bg()); err != nil {
		t.Fatal(err)
	}
	w := within(t, "the writer is handed the lock", writer)
	if w == nil || w.Shared() || w.Fence() <= second.Fence() {
		t.Fatalf("the writer: %v", w)
	}
	if _, err := w.Guard(bg(), "SET", "catalog:items", "13"); err != nil {
		t.Fatal(err)
	}
	if err := w.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestSemaphore(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	renders := locks.Semaphore("renders", 3)
	one, err := renders.Acquire(bg(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	two, err := renders.Acquire(bg(), 10*time.Second, redislock.Count(2))
	if err != nil || two.Count() != 2 || two.Fence() <= one.Fence() {
		t.Fatalf("two permits: %v %v", two, err)
	}
	if _, err := renders.Acquire(bg(), time.Second); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("all permits out: want ErrNotObtained, got %v", err)
	}
	info, err := renders.Info(bg())
	if err != nil || info == nil || info.Limit != 3 || info.Used != 3 || info.Holders != 2 {
		t.Fatalf("SEM.INFO: %+v %v", info, err)
	}
	if _, err := two.Guard(bg(), "GET", "x"); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("permits guard nothing: %v", err)
	}
	var serverErr redislock.ServerError
	if _, err := locks.Semaphore("renders", 4).Acquire(bg(), time.Second); !errors.As(err, &serverErr) || serverErr.Code() != "ERR" {
		t.Fatalf("another limit: want the server's error, got %v", err)
	}
	if _, err := locks.Obtain(bg(), "renders", time.Second); !errors.As(err, &serverErr) || serverErr.Code() != "WRONGTYPE" {
		t.Fatalf("a semaphore key as a lock: want WRONGTYPE, got %v", err)
	}
	waiter := make(chan *redislock.Lock, 1)
	go func() {
		lock, err := renders.Acquire(bg(), time.Second, redislock.Count(2), redislock.Wait(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		waiter <- lock
	}()
	eventually(t, "the waiter queues", func() bool { return s.queued("renders") == 1 })
	if err := two.Release(bg()); err != nil {
		t.Fatal(err)
	}
	got := within(t, "the waiter is handed two permits", waiter)
	if got == nil || got.Count() != 2 {
		t.Fatalf("the waiter: %v", got)
	}
	// The permits' watchdog (SEM.EXTEND) sees their loss.
	s.do("DEL", "renders")
	within(t, "the permits are lost", got.Lost())
	within(t, "every holder sees it", one.Context().Done())
	if !errors.Is(one.Err(), redislock.ErrNotHeld) {
		t.Fatalf("want a refused loss, got %v", one.Err())
	}
	if err := got.Release(bg()); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("releasing lost permits: want ErrNotHeld, got %v", err)
	}
}

func TestElection(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	observeCtx, stopObserving := context.WithCancel(bg())
	defer stopObserving()
	a := locks.Election("scheduler:leader", 10*time.Second, redislock.Owner("host-a"))
	a.ObserveTimeout = time.Second // the observer also asks again after a quiet second
	changes := a.Observe(observeCtx)
	if o := within(t, "the leader now", changes); o.Err != nil || o.Leader != nil {
		t.Fatalf("nobody leads yet: %+v", o)
	}
	leaderA, err := a.Campaign(bg())
	if err != nil {
		t.Fatal(err)
	}
	o := within(t, "the observer sees host-a", changes)
	if o.Err != nil || o.Leader == nil || o.Leader.Owner != "host-a" || o.Leader.Fence != leaderA.Fence() {
		t.Fatalf("observed %+v", o)
	}
	now, err := a.Leader(bg())
	if err != nil || now == nil || now.Owner != "host-a" {
		t.Fatalf("Leader: %+v %v", now, err)
	}
	b := locks.Election("scheduler:leader", time.Second, redislock.Owner("host-b"))
	elected := make(chan *redislock.Lock, 1)
	go func() {
		lock, err := b.Campaign(bg())
		if err != nil {
			t.Error(err)
		}
		elected <- lock
	}()
	eventually(t, "host-b queues", func() bool { return s.queued("scheduler:leader") == 1 })
	// A candidate with a deadline gives up, and leaves the queue.
	ctx, cancel := context.WithTimeout(bg(), 200*time.Millisecond)
	defer cancel()
	if _, err := locks.Election("scheduler:leader", time.Second).Campaign(ctx); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("a campaign past its deadline: want ErrNotObtained, got %v", err)
	}
	if err := leaderA.Release(bg()); err != nil { // resigns: host-b leads
		t.Fatal(err)
	}
	leaderB := within(t, "host-b is elected", elected)
	o = within(t, "the observer sees host-b", changes)
	if o.Leader == nil || o.Leader.Owner != "host-b" || o.Leader.Fence != leaderB.Fence() || leaderB.Fence() <= leaderA.Fence() {
		t.Fatalf("observed %+v (host-b's fence %d)", o, leaderB.Fence())
	}
	s.do("DEL", "scheduler:leader") // deposed
	within(t, "host-b learns it is deposed", leaderB.Context().Done())
	if o := within(t, "the observer sees nobody", changes); o.Leader != nil {
		t.Fatalf("observed %+v", o)
	}
	stopObserving()
	for range changes { // closed once the context is done
	}
}

func TestObserverReportsAndSurvivesAConnectionError(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	changes := locks.Election("leader", 10*time.Second).Observe(ctx)
	within(t, "the leader now", changes)
	eventually(t, "the observer blocks", func() bool {
		return s.info("leader") == nil && observers(s) == 1
	})
	s.do("CLIENT", "KILL", "TYPE", "normal")
	if o := within(t, "the error", changes); o.Err == nil {
		t.Fatalf("want the connection's error, got %+v", o)
	}
	lock, err := locks.Election("leader", 10*time.Second, redislock.Owner("c")).Campaign(bg())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(bg())
	for {
		o := within(t, "the observer reconnects and sees the leader", changes)
		if o.Leader != nil && o.Leader.Owner == "c" {
			return
		}
	}
}
