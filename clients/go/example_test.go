package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// The example of docs/clients/go.md (compiled by go test, not run: it needs
// a server on 127.0.0.1:6379).
func Example() {
	ctx := context.Background()
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", "127.0.0.1:6379") }}
	locks := redislock.New(redislock.NewRedigo(pool))

	lock, err := locks.Obtain(ctx, "billing", 10*time.Second, redislock.Wait(30*time.Second))
	if errors.Is(err, redislock.ErrNotObtained) {
		return // another worker ran it, or the wait ran out
	} else if err != nil {
		panic(err)
	}
	defer lock.Release(context.Background())
	bill(lock.Context(), lock.Fence()) // the context is cancelled if the lock is lost
}

func bill(ctx context.Context, fence int64) { fmt.Println(ctx.Err(), fence) }

// Leader election: campaign in the server's queue, follow the leader with
// no polling.
func ExampleElection() {
	ctx := context.Background()
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", "127.0.0.1:6379") }}
	election := redislock.New(redislock.NewRedigo(pool)).Election("scheduler:leader", 10*time.Second, redislock.Owner("host-a"))
	go func() {
		for change := range election.Observe(ctx) { // the leader now, then each change
			if change.Err == nil && change.Leader != nil {
				fmt.Println(change.Leader.Owner, "leads with fence", change.Leader.Fence)
			}
		}
	}()
	leader, err := election.Campaign(ctx) // waits until it leads
	if err != nil {
		panic(err)
	}
	defer leader.Release(context.Background()) // resign
	<-leader.Context().Done()                  // lead until deposed
}
