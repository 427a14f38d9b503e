package redislock

import (
	"context"
	"fmt"
	"time"
)

// Limits the server enforces (docs/commands.md), checked before sending.
const (
	// MaxWait is the longest WAIT the server accepts: 365 days.
	MaxWait = 365 * 24 * time.Hour
	// MaxOwnerBytes bounds an OWNER label.
	MaxOwnerBytes = 128
	// MaxSemaphoreLimit is the largest limit of a semaphore.
	MaxSemaphoreLimit = 1000000
	// MaxSyncReplicas is the most replicas SYNC may wait for.
	MaxSyncReplicas = 1000
)

// Option adjusts one Obtain, Semaphore.Acquire or Election.
type Option func(*options)

type options struct {
	wait       time.Duration
	waits      bool
	owner      string
	hasOwner   bool
	shared     bool
	count      int
	noWatchdog bool
	sync       replicaSync
}

// replicaSync is SYNC numreplicas timeout-ms; replicas 0 is no SYNC.
type replicaSync struct {
	replicas int
	timeout  time.Duration
}

// args is the SYNC option on the wire, or nothing.
func (s replicaSync) args() []interface{} {
	if s.replicas == 0 {
		return nil
	}
	return []interface{}{"SYNC", s.replicas, ms(s.timeout)}
}

// Wait makes Obtain (or Semaphore.Acquire) wait up to d in the server's
// first-in, first-out queue for the key (LOCK.ACQUIRE … WAIT), on a
// connection of its own; the context's deadline, when sooner, bounds it too.
// Without Wait, Obtain does not block: ErrNotObtained at once when the lock is
// held. d is 1 ms to 365 days.
func Wait(d time.Duration) Option {
	return func(o *options) { o.wait, o.waits = d, true }
}

// Owner labels the holder (1 to 128 bytes): LOCK.INFO, LOCK.QUEUE and
// LOCK.OBSERVE show it, so an operator can tell who holds a lock. It is
// public and grants nothing.
func Owner(label string) Option {
	return func(o *options) { o.owner, o.hasOwner = label, true }
}

// Shared asks for a read lock (LOCK.ACQUIRE … SHARED): held beside other
// readers, each with its own token, lease and fence; refused while a writer
// holds the key or anyone waits for it. Its Guard runs read-only commands
// only.
func Shared() Option {
	return func(o *options) { o.shared = true }
}

// Count is how many of a semaphore's permits to take under one token (1 to
// the limit; default 1). Semaphore.Acquire only.
func Count(n int) Option {
	return func(o *options) { o.count = n }
}

// Sync makes the acquire answered only once replicas replicas (1 to 1000)
// acknowledged the grant, within timeout (1 ms to 365 days, shorter than
// the ttl): SYNC numreplicas timeout-ms. When fewer did, the server undoes
// the grant and the acquire fails with a *NotReplicatedError
// (ErrNotReplicated): nothing is held. The lock's extends (Refresh, its
// watchdog's) carry the same SYNC; one answered NOSYNC stands on the master
// only, so it does not move the lock's deadline (the watchdog tries again
// until the deadline less the margin). A lock taken with Sync keeps a
// watchdog of its own rather than joining a Session: a keepalive carries no
// SYNC. Sync(0, …) is no SYNC.
func Sync(replicas int, timeout time.Duration) Option {
	return func(o *options) { o.sync = replicaSync{replicas: replicas, timeout: timeout} }
}

// WithoutWatchdog leaves the extending to the caller (Lock.Refresh): the
// lock is attached to no Session and has no watchdog. Its Context is still
// cancelled at its deadline less the safety margin.
func WithoutWatchdog() Option {
	return func(o *options) { o.noWatchdog = true }
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// kind is what a hold is: an exclusive lock, a reader, or semaphore permits.
type kind int

const (
	exclusive kind = iota
	reader
	permits
)

// commands of each kind: the same hold, under one lease path.
func (k kind) extendCommand() string {
	if k == permits {
		return "SEM.EXTEND"
	}
	return "LOCK.EXTEND"
}

func (k kind) releaseCommand() string {
	if k == permits {
		return "SEM.RELEASE"
	}
	return "LOCK.RELEASE"
}

// request is one checked acquire: its arguments and the client's token.
// A multi-key request (ObtainMany) has keys, key being the first of them:
// one hold over every key, with one token and one fence.
type request struct {
	kind     kind
	key      string
	keys     []string // nil for one key
	sync     replicaSync
	ttl      time.Duration
	token    string
	waits    bool
	wait     time.Duration // with waits: 0 is no limit (an election's campaign)
	owner    string
	hasOwner bool
	limit    int
	count    int
	watchdog bool
}

func checkTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return invalidArgument(fmt.Sprintf("ttl must be at least 1ms, not %v", ttl))
	}
	return nil
}

func newRequest(k kind, key string, ttl time.Duration, o options) (request, error) {
	if key == "" {
		return request{}, invalidArgument("key must not be empty")
	}
	if err := checkTTL(ttl); err != nil {
		return request{}, err
	}
	if o.waits && (o.wait < time.Millisecond || o.wait > MaxWait) {
		return request{}, invalidArgument(fmt.Sprintf("wait must be 1ms to 365 days, not %v", o.wait))
	}
	if o.hasOwner && (len(o.owner) == 0 || len(o.owner) > MaxOwnerBytes) {
		return request{}, invalidArgument(fmt.Sprintf("owner must be 1 to %d bytes, not %d", MaxOwnerBytes, len(o.owner)))
	}
	if k == permits && o.shared {
		return request{}, invalidArgument("Shared is for locks, not semaphores")
	}
	if k != permits && o.count != 0 {
		return request{}, invalidArgument("Count is for semaphores, not locks")
	}
	if o.sync.replicas != 0 {
		if o.sync.replicas < 0 || o.sync.replicas > MaxSyncReplicas {
			return request{}, invalidArgument(fmt.Sprintf("sync replicas must be 0 to %d, not %d", MaxSyncReplicas, o.sync.replicas))
		}
		if o.sync.timeout < time.Millisecond || o.sync.timeout >= ttl {
			return request{}, invalidArgument(fmt.Sprintf("sync timeout must be 1ms to less than the ttl (%v), not %v", ttl, o.sync.timeout))
		}
	}
	if o.shared {
		k = reader
	}
	token, err := newToken()
	if err != nil {
		return request{}, err
	}
	return request{
		kind: k, key: key, ttl: ttl, token: token,
		waits: o.waits, wait: o.wait,
		owner: o.owner, hasOwner: o.hasOwner,
		count: o.count, watchdog: !o.noWatchdog, sync: o.sync,
	}, nil
}

// newManyRequest is a request for every key of keys at once (LOCK.MACQUIRE).
func newManyRequest(keys []string, ttl time.Duration, o options) (request, error) {
	if len(keys) == 0 {
		return request{}, invalidArgument("keys must not be empty")
	}
	seen := make(map[string]bool, len(keys))
	for _, key := range keys {
		if key == "" {
			return request{}, invalidArgument("key must not be empty")
		}
		if seen[key] {
			return request{}, invalidArgument(fmt.Sprintf("key %q is given more than once", key))
		}
		seen[key] = true
	}
	req, err := newRequest(exclusive, keys[0], ttl, o)
	if err != nil {
		return request{}, err
	}
	req.keys = append([]string(nil), keys...)
	return req, nil
}

// bounded is ctx bounded by the sync timeout and a read slack when the
// request carries SYNC (a Driver reads a context's deadline as the read
// timeout), so that the connection's own read timeout, which may be
// shorter than the sync timeout, does not cut the answer off.
func (r *request) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.sync.replicas == 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, r.sync.timeout+waitReadSlack)
}

// holds is how many holds the server counts for this request: one per key.
func (r *request) holds() int {
	if r.keys == nil {
		return 1
	}
	return len(r.keys)
}

// keyArgs is numkeys key [key ...] of a multi-key command.
func (r *request) keyArgs(command string) []interface{} {
	args := make([]interface{}, 0, len(r.keys)+6)
	args = append(args, command, len(r.keys))
	for _, key := range r.keys {
		args = append(args, key)
	}
	return args
}

// extendArgs is the extend of this hold for ttl, with its SYNC.
func (r *request) extendArgs(ttl time.Duration) []interface{} {
	var args []interface{}
	if r.keys != nil {
		args = append(r.keyArgs("LOCK.MEXTEND"), r.token, ms(ttl))
	} else {
		args = []interface{}{r.kind.extendCommand(), r.key, r.token, ms(ttl)}
	}
	return append(args, r.sync.args()...)
}

// releaseArgs gives back every key of this hold.
func (r *request) releaseArgs() []interface{} {
	if r.keys != nil {
		return append(r.keyArgs("LOCK.MRELEASE"), r.token)
	}
	return []interface{}{r.kind.releaseCommand(), r.key, r.token}
}

// args is the acquire command, with WAIT waitMs when it waits, and LEASE
// lease unless lease is "".
func (r *request) args(waitMs int64, lease string) []interface{} {
	var args []interface{}
	if r.kind == permits {
		args = []interface{}{"SEM.ACQUIRE", r.key, r.limit, ms(r.ttl), "COUNT", r.count}
	} else if r.keys != nil {
		args = append(r.keyArgs("LOCK.MACQUIRE"), ms(r.ttl))
	} else {
		args = []interface{}{"LOCK.ACQUIRE", r.key, ms(r.ttl)}
	}
	args = append(args, "TOKEN", r.token)
	if r.kind == reader {
		args = append(args, "SHARED")
	}
	if r.waits {
		args = append(args, "WAIT", waitMs)
	}
	if r.hasOwner {
		args = append(args, "OWNER", r.owner)
	}
	args = append(args, r.sync.args()...)
	if lease != "" {
		args = append(args, "LEASE", lease)
	}
	return args
}

// ms is a duration as whole milliseconds on the wire, rounded up so that a
// positive duration never becomes 0.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
