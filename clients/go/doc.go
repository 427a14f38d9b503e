// Package redislock is the Go client of redis-lock, the Redis module that
// adds native lock commands (LOCK.ACQUIRE, LOCK.EXTEND, LOCK.RELEASE,
// LOCK.GUARD, LOCK.OBSERVE, LOCK.LEASE, LOCK.REVOKE, SEM.*): fenced locks,
// waits in the server's FIFO queue, read/write locks, semaphores and leader
// election, over redigo (NewRedigo) or, for Redis Cluster, redisc (package
// cluster). Every hold a Client takes is attached to its Session: one
// server lease per node and ttl, kept alive by one LOCK.LEASE KEEPALIVE
// every ttl/3 whatever the number of holds; a hold lost (run out, deleted,
// revoked by an operator with Client.Revoke) cancels its own context.
//
//	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", "127.0.0.1:6379") }}
//	locks := redislock.New(redislock.NewRedigo(pool))
//	lock, err := locks.Obtain(ctx, "billing", 10*time.Second, redislock.Wait(30*time.Second))
//	if errors.Is(err, redislock.ErrNotObtained) {
//		return nil // another worker runs it
//	} else if err != nil {
//		return err
//	}
//	defer lock.Release(context.Background())
//	return bill(lock.Context(), lock.Fence()) // the context is cancelled if the lock is lost
//
// Durations are time.Duration, sent as whole milliseconds (rounded up). The
// package follows the rules of docs/clients.md: the token is a UUIDv4 the
// client draws and always sends; after an error that may hide a grant (a lost
// reply, a cancelled wait) it releases with that token; a WAIT runs on a
// connection of its own whose read timeout is longer than the wait, and is
// followed by one extend that pins the lease to a known send time (unless
// the hold is attached to a session, whose keepalives set its clock); the
// lease is counted from the send of the command that set it, on the
// monotonic clock. No error carries a token or a lease id. See
// docs/clients/go.md.
package redislock
