package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/mna/redisc"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/cluster"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

func bg() context.Context { return context.Background() }

// newCluster is a redisc cluster that knows only startup; refreshed or not
// (then its first command for a slot goes to startup, and follows MOVED).
func newCluster(t *testing.T, startup *testserver.Server, refresh bool) *redisc.Cluster {
	c := &redisc.Cluster{
		StartupNodes: []string{startup.Addr()},
		DialOptions:  []redis.DialOption{redis.DialConnectTimeout(2 * time.Second), redis.DialReadTimeout(2 * time.Second)},
	}
	t.Cleanup(func() { c.Close() })
	if refresh {
		if err := c.Refresh(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// holder is the node whose LOCK.INFO key shows fence; the others answer MOVED.
func holder(t *testing.T, nodes []*testserver.Server, key string, fence int64) *testserver.Server {
	t.Helper()
	var found *testserver.Server
	for _, node := range nodes {
		reply, err := node.TryDo("LOCK.INFO", key)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "MOVED ") {
				t.Fatalf("LOCK.INFO %s on %s: %v", key, node.Addr(), err)
			}
			continue
		}
		fields, _ := redis.Values(reply, nil)
		if len(fields) < 2 || found != nil {
			t.Fatalf("%s: %v on %s", key, fields, node.Addr())
		}
		if got, _ := redis.Int64(fields[1], nil); got != fence {
			t.Fatalf("%s: fence %d on %s, not %d", key, got, node.Addr(), fence)
		}
		found = node
	}
	if found == nil {
		t.Fatalf("no node holds %s", key)
	}
	return found
}

func notOn(t *testing.T, node *testserver.Server, prefix string) string {
	for i := 0; i < 1000; i++ {
		key := fmt.Sprintf("%s:%d", prefix, i)
		if _, err := node.TryDo("LOCK.INFO", key); err != nil && strings.HasPrefix(err.Error(), "MOVED ") {
			return key
		}
	}
	t.Fatalf("every %s:N lives on %s", prefix, node.Addr())
	return ""
}

func moved(node *testserver.Server) int64 {
	text, _ := redis.String(node.Do("INFO", "errorstats"), nil)
	var n int64
	for _, line := range strings.Split(strings.ReplaceAll(text, "\r", ""), "\n") {
		if _, err := fmt.Sscanf(line, "errorstat_MOVED:count=%d", &n); err == nil {
			return n
		}
	}
	return 0
}

func TestCluster(t *testing.T) {
	nodes := testserver.Cluster(t)
	locks := redislock.New(cluster.New(newCluster(t, nodes[0], true)))

	t.Run("each lock on its key's master", func(t *testing.T) {
		used := map[string]bool{}
		for i := 0; i < 24; i++ {
			key := fmt.Sprintf("job:%d", i)
			lock, err := locks.Obtain(bg(), key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			used[holder(t, nodes, key, lock.Fence()).Addr()] = true
			if err := lock.Release(bg()); err != nil {
				t.Fatal(err)
			}
		}
		if len(used) != len(nodes) {
			t.Fatalf("24 keys on %d of %d masters", len(used), len(nodes))
		}
	})

	t.Run("one session lease per master", func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		leasesBefore := map[*testserver.Server]int64{}
		for _, node := range nodes {
			leasesBefore[node] = node.Counter("lock", "lock_leases") // the other tests' ttl has its own
		}
		sessions := map[*redislock.Session]*testserver.Server{}
		var held []*redislock.Lock
		for i := 0; i < 24; i++ {
			key := fmt.Sprintf("held:%d", i)
			lock, err := locks.Obtain(bg(), key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			node := holder(t, nodes, key, lock.Fence())
			if known, ok := sessions[lock.Session()]; lock.Session() == nil || (ok && known != node) {
				t.Fatalf("%s: a session's holds are on its node", key)
			}
			sessions[lock.Session()] = node
			held = append(held, lock)
		}
		if len(sessions) != len(nodes) {
			t.Fatalf("%d sessions for %d masters", len(sessions), len(nodes))
		}
		for session, node := range sessions {
			if n := node.Counter("lock", "lock_leases") - leasesBefore[node]; n != 1 {
				t.Fatalf("%s: %d new leases, want 1", node.Addr(), n)
			}
			reply, err := redis.Values(node.Do("LOCK.LEASE", "INFO", session.ID()), nil)
			if err != nil || len(reply) == 0 {
				t.Fatalf("%s: the session's lease is not there: %v", node.Addr(), err)
			}
		}
		// Each session's keepalive goes to its own master: all still held
		// after three ttls, with no extend anywhere.
		time.Sleep(3 * ttl)
		for _, lock := range held {
			if lock.Err() != nil {
				t.Fatalf("%s: %v", lock.Key(), lock.Err())
			}
			if err := lock.Release(bg()); err != nil {
				t.Fatal(err)
			}
		}
		for _, node := range nodes {
			if keepalives := node.Counter("lock", "lock_keepalives"); keepalives < 2 {
				t.Fatalf("%s: %d keepalives", node.Addr(), keepalives)
			}
			text, _ := redis.String(node.Do("INFO", "commandstats"), nil)
			if strings.Contains(text, "cmdstat_lock.extend:") {
				t.Fatalf("%s: an attached hold was extended", node.Addr())
			}
		}
	})

	t.Run("guard with a hash tag", func(t *testing.T) {
		lock, err := locks.Obtain(bg(), "{billing}:lock", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(bg())
		total, err := redis.Int64(lock.Guard(bg(), "INCRBY", "{billing}:total", 6000))
		if err != nil || total != 6000 {
			t.Fatalf("guarded INCRBY: %v %v", total, err)
		}
		var serverErr redislock.ServerError
		if _, err := lock.Guard(bg(), "SET", "other", 1); !errors.As(err, &serverErr) || serverErr.Code() != "CROSSSLOT" {
			t.Fatalf("a key of another slot: want CROSSSLOT, got %v", err)
		}
	})

	t.Run("wait and observe on the key's master", func(t *testing.T) {
		key := notOn(t, nodes[0], "leader")
		election := locks.Election(key, 10*time.Second, redislock.Owner("a"))
		ctx, cancel := context.WithCancel(bg())
		defer cancel()
		changes := election.Observe(ctx)
		if o := <-changes; o.Err != nil || o.Leader != nil {
			t.Fatalf("nobody leads: %+v", o)
		}
		first, err := election.Campaign(bg())
		if err != nil {
			t.Fatal(err)
		}
		if o := <-changes; o.Leader == nil || o.Leader.Fence != first.Fence() {
			t.Fatalf("observed %+v", o)
		}
		handed := make(chan *redislock.Lock, 1)
		go func() {
			lock, err := locks.Obtain(bg(), key, 10*time.Second, redislock.Wait(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			handed <- lock
		}()
		node := holder(t, nodes, key, first.Fence())
		deadline := time.Now().Add(10 * time.Second)
		for node.Counter("lock", "lock_waiters") < 1 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if err := first.Release(bg()); err != nil {
			t.Fatal(err)
		}
		var next *redislock.Lock
		select {
		case next = <-handed:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not handed the lock")
		}
		if next == nil || next.Fence() <= first.Fence() {
			t.Fatalf("handed %v", next)
		}
		if o := <-changes; o.Leader == nil || o.Leader.Fence != next.Fence() {
			t.Fatalf("observed %+v", o)
		}
		next.Release(bg())
	})

	t.Run("MOVED is followed", func(t *testing.T) {
		key := notOn(t, nodes[0], "moved")
		before := moved(nodes[0])
		// Not refreshed: the first command goes to nodes[0], which answers MOVED.
		stale := redislock.New(cluster.New(newCluster(t, nodes[0], false)))
		lock, err := stale.Obtain(bg(), key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if moved(nodes[0]) <= before {
			t.Fatal("no MOVED was answered: the test proves nothing")
		}
		holder(t, nodes, key, lock.Fence())
		// A WAIT on a dedicated connection follows it too.
		waiting := redislock.New(cluster.New(newCluster(t, nodes[0], false)))
		before = moved(nodes[0])
		_, err = waiting.Obtain(bg(), key, time.Second, redislock.Wait(100*time.Millisecond))
		if !errors.Is(err, redislock.ErrNotObtained) || moved(nodes[0]) <= before {
			t.Fatalf("the wait on the key's master ran out: want ErrNotObtained after a MOVED, got %v", err)
		}
		if err := lock.Release(bg()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ASK is followed during a migration", func(t *testing.T) {
		key := notOn(t, nodes[0], "migrating")
		slot, _ := redis.Int(nodes[0].Do("CLUSTER", "KEYSLOT", key), nil)
		var source *testserver.Server
		for _, node := range nodes[1:] {
			if _, err := node.TryDo("LOCK.INFO", key); err == nil {
				source = node
			}
		}
		target := nodes[0]
		sourceID, _ := redis.String(source.Do("CLUSTER", "MYID"), nil)
		targetID, _ := redis.String(target.Do("CLUSTER", "MYID"), nil)
		target.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", sourceID)
		source.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", targetID)
		defer func() {
			target.Do("CLUSTER", "SETSLOT", slot, "STABLE")
			source.Do("CLUSTER", "SETSLOT", slot, "STABLE")
		}()
		// The key is not on the source: it answers ASK, and the lock is made on the target.
		lock, err := locks.Obtain(bg(), key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := redis.Dial("tcp", target.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Send("ASKING")
		conn.Send("LOCK.INFO", key)
		conn.Flush()
		conn.Receive()
		fields, err := redis.Values(conn.Receive())
		if err != nil || len(fields) < 2 {
			t.Fatalf("the importing node does not hold the lock: %v %v", fields, err)
		}
		if fence, _ := redis.Int64(fields[1], nil); fence != lock.Fence() {
			t.Fatalf("fence %d on the target, not %d", fence, lock.Fence())
		}
		if err := lock.Release(bg()); err != nil {
			t.Fatal(err)
		}
	})
}
