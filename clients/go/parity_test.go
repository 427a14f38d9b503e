package redislock_test

// SYNC on acquires and extends, one lock over several keys
// (LOCK.MACQUIRE, LOCK.MEXTEND, LOCK.MRELEASE), and the check of the
// server's module version: what the Python and Rust packages have too.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// replicaOf starts a server that replicates master, and waits (a bounded
// while) until the master counts it as connected and in sync.
func replicaOf(t *testing.T, master *server) *server {
	t.Helper()
	replica := startServer(t)
	replica.do("REPLICAOF", "127.0.0.1", fmt.Sprint(master.Port))
	eventually(t, "the replica is connected and in sync", func() bool {
		text, _ := redis.String(replica.do("INFO", "replication"), nil)
		return master.Counter("replication", "connected_slaves") == 1 &&
			contains(text, "master_link_status:up")
	})
	return replica
}

func contains(text, part string) bool { return len(text) >= len(part) && indexOf(text, part) >= 0 }

func indexOf(text, part string) int {
	for i := 0; i+len(part) <= len(text); i++ {
		if text[i:i+len(part)] == part {
			return i
		}
	}
	return -1
}

func TestSyncAcquireIsAnsweredOnceAReplicaHoldsIt(t *testing.T) {
	t.Parallel()
	master := startServer(t, "--repl-diskless-sync-delay", "0")
	replica := replicaOf(t, master)
	locks := master.client()
	// Generous timeouts: a slow machine takes longer, the test does not fail.
	lock, err := locks.Obtain(bg(), "synced", 30*time.Second, redislock.Sync(1, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if lock.Session() != nil {
		t.Fatal("a lock taken with Sync keeps its own watchdog (a keepalive carries no SYNC)")
	}
	// Answered only once the replica acknowledged: it holds the grant now.
	if info := replica.info("synced"); info == nil || info["fence"] != lock.Fence() {
		t.Fatalf("the replica does not hold the grant when the acquire returned: %v", info)
	}
	if err := lock.Refresh(bg(), 30*time.Second); err != nil {
		t.Fatalf("an extend with SYNC and a replica: %v", err)
	}
	if master.calls("lock.extend") != 1 {
		t.Fatalf("Refresh sent %d LOCK.EXTEND", master.calls("lock.extend"))
	}
	if err := lock.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestSyncRefusedUndoesTheGrant(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	// No replica: SYNC 1 runs out, and the server undoes the grant.
	_, err := locks.Obtain(bg(), "unsynced", 30*time.Second, redislock.Sync(1, 100*time.Millisecond))
	var notReplicated *redislock.NotReplicatedError
	if !errors.Is(err, redislock.ErrNotReplicated) || !errors.As(err, &notReplicated) {
		t.Fatalf("want a *NotReplicatedError, got %v", err)
	}
	if notReplicated.Acked != 0 || notReplicated.Wanted != 1 || !notReplicated.Undone {
		t.Fatalf("NOSYNC read as %+v", notReplicated)
	}
	if errors.Is(err, redislock.ErrNotObtained) {
		t.Fatal("NOSYNC is told apart from a busy lock")
	}
	if s.info("unsynced") != nil {
		t.Fatal("NOSYNC: the grant was undone, so nothing may be held")
	}
	// The same with Wait, through the dedicated connection.
	_, err = locks.Obtain(bg(), "unsynced", 30*time.Second, redislock.Wait(time.Second), redislock.Sync(1, 100*time.Millisecond))
	if !errors.Is(err, redislock.ErrNotReplicated) || s.info("unsynced") != nil {
		t.Fatalf("with Wait: want ErrNotReplicated and nothing held, got %v, %v", err, s.info("unsynced"))
	}
	// A lock on several keys: every key is given back.
	_, err = locks.ObtainMany(bg(), []string{"{u}a", "{u}b"}, 30*time.Second, redislock.Sync(1, 100*time.Millisecond))
	if !errors.Is(err, redislock.ErrNotReplicated) || s.info("{u}a") != nil || s.info("{u}b") != nil {
		t.Fatalf("several keys: want ErrNotReplicated and nothing held, got %v", err)
	}
}

func TestSyncArgumentsAreChecked(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	for _, opt := range []redislock.Option{
		redislock.Sync(1001, time.Second), redislock.Sync(-1, time.Second),
		redislock.Sync(1, 0), redislock.Sync(1, 10*time.Second),
	} {
		if _, err := locks.Obtain(bg(), "k", 10*time.Second, opt); !errors.Is(err, redislock.ErrInvalidArgument) {
			t.Fatalf("want ErrInvalidArgument, got %v", err)
		}
	}
	if s.info("k") != nil {
		t.Fatal("an invalid argument sends nothing")
	}
}

func TestObtainManyIsAllOrNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client()
	keys := []string{"{order}stock", "{order}payment", "{order}mail"}
	busy, err := locks.Obtain(bg(), keys[1], 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.ObtainMany(bg(), keys, 10*time.Second); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("one key busy: want ErrNotObtained, got %v", err)
	}
	if s.info(keys[0]) != nil || s.info(keys[2]) != nil {
		t.Fatal("a refused multi-key acquire granted some keys")
	}
	if err := busy.Release(bg()); err != nil {
		t.Fatal(err)
	}
	lock, err := locks.ObtainMany(bg(), keys, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := lock.Keys(); len(got) != 3 || got[0] != keys[0] || lock.Key() != keys[0] {
		t.Fatalf("Keys: %v", got)
	}
	for _, key := range keys {
		if info := s.info(key); info == nil || info["fence"] != lock.Fence() {
			t.Fatalf("%s: want the one fence %d, got %v", key, lock.Fence(), info)
		}
	}
	if lock.Fence() <= busy.Fence() {
		t.Fatalf("the multi-key fence %d must be above every earlier one (%d)", lock.Fence(), busy.Fence())
	}
	if _, err := lock.Guard(bg(), "SET", "{order}x", "1"); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("Guard of several keys: want ErrInvalidArgument, got %v", err)
	}
	if _, err := locks.ObtainMany(bg(), []string{"a", "a"}, time.Second); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("a key given twice: want ErrInvalidArgument, got %v", err)
	}
	if err := lock.Release(bg()); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if s.info(key) != nil {
			t.Fatalf("released, but %s is still held", key)
		}
	}
	if err := lock.Release(bg()); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("a second Release: want ErrNotHeld, got %v", err)
	}
}

func TestObtainManyIsLostWhenOneKeyIsDeleted(t *testing.T) {
	t.Parallel()
	for _, mode := range []redislock.KeepAlive{redislock.KeepAliveSession, redislock.KeepAliveWatchdog} {
		mode := mode
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			locks := s.client(redislock.WithKeepAlive(mode))
			keys := []string{"{j}a", "{j}b", "{j}c"}
			lock, err := locks.ObtainMany(bg(), keys, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if (lock.Session() != nil) != (mode == redislock.KeepAliveSession) {
				t.Fatalf("%v: Session %v", mode, lock.Session())
			}
			s.do("DEL", keys[1])
			within(t, "the loss of one key is the lock's", lock.Lost())
			if !errors.Is(lock.Err(), redislock.ErrNotHeld) {
				t.Fatalf("want a refusal, got %v", lock.Err())
			}
			// The other keys stay held until the release, which gives them
			// back but says that not every key was held.
			if err := lock.Release(bg()); !errors.Is(err, redislock.ErrNotHeld) {
				t.Fatalf("a release of which one key was gone: want ErrNotHeld, got %v", err)
			}
			if s.info(keys[0]) != nil || s.info(keys[2]) != nil {
				t.Fatal("released, but keys are still held")
			}
		})
	}
}

func TestObtainManyIsKeptAliveTogether(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	locks := s.client(redislock.WithKeepAlive(redislock.KeepAliveWatchdog))
	keys := []string{"{k}a", "{k}b"}
	lock, err := locks.ObtainMany(bg(), keys, 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the watchdog extends every key at once", func() bool { return s.calls("lock.mextend") >= 2 })
	if lock.Err() != nil || s.info(keys[0]) == nil || s.info(keys[1]) == nil {
		t.Fatalf("kept alive past its ttl: %v", lock.Err())
	}
	if err := lock.Release(bg()); err != nil {
		t.Fatal(err)
	}
}
