package redislock

// The seam between the package and a Redis client library: a Driver sends
// one command at a time, on a shared connection or on one of its own. The
// redigo Driver (NewRedigo) and the redisc one (package cluster) are the two
// this package ships; docs/clients/go.md shows how to write another.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Driver is what the package needs from a client library.
//
// Replies are returned as RESP2 values: nil for a null reply, int64 for an
// integer, []byte or string for a bulk or simple string, []interface{} for an
// array (a RESP3 map may be given as map[string]interface{}). An error reply
// from the server must be returned as a ServerError, with its full text (code
// first, as in "LOST the token does not hold the lock: …"): any other error is
// taken as a transport error, after which the command may or may not have run.
type Driver interface {
	// Do sends one command on a shared connection (from a pool, say) to the
	// server that owns the command's first argument (the key of every lock
	// command), and returns its reply. It should give up when ctx is done or
	// its deadline passes, and must not re-send a command on its own.
	Do(ctx context.Context, args ...interface{}) (interface{}, error)
	// Dedicated opens a connection of its own to the server that owns key,
	// for one blocking command at a time (LOCK.ACQUIRE … WAIT,
	// LOCK.OBSERVE). The package closes it when done.
	Dedicated(ctx context.Context, key string) (DedicatedConn, error)
}

// Router is what a Driver for Redis Cluster adds, so that the package keeps
// one session lease per node: LOCK.LEASE has no key to route by, and a
// lease lives on the node that granted it. A Driver without it is taken as
// one server (its Do sends LOCK.LEASE as any command). The cluster
// package's Driver has it.
type Router interface {
	// NodeOf names the master that serves key (its address, say), as the
	// driver sees the cluster now; with refresh, after reading the
	// cluster's slot map again.
	NodeOf(ctx context.Context, key string, refresh bool) (string, error)
	// DoOn sends one command to the node NodeOf named, with Do's rules.
	DoOn(ctx context.Context, node string, args ...interface{}) (interface{}, error)
}

// DedicatedConn is a connection of its own, never shared and never
// reconnected behind the package's back: a re-sent WAIT would queue again, at
// the tail.
type DedicatedConn interface {
	// Do sends one command and waits at most timeout for its reply (0: no
	// limit).
	Do(timeout time.Duration, args ...interface{}) (interface{}, error)
	// Close closes the connection. Called from another goroutine, it must
	// make a Do blocked on this connection return: that is how a cancelled
	// wait leaves the server's queue.
	Close() error
}

// ServerError is an error reply of the server, as its full text: "LOST …",
// "ERR …", "WRONGTYPE …". Drivers return error replies as this type.
type ServerError string

func (e ServerError) Error() string { return string(e) }

// Code is the first word of the reply, such as "ERR", "LOST", "LIMIT",
// "WRONGTYPE" or "NOPERM".
func (e ServerError) Code() string {
	code, _, _ := strings.Cut(string(e), " ")
	return code
}

// replyInt reads an integer reply.
func replyInt(reply interface{}) (int64, error) {
	switch v := reply.(type) {
	case int64:
		return v, nil
	case int:
		return int64(v), nil
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("redislock: unexpected reply %T, not an integer", reply)
}

// replyString reads a bulk or simple string reply.
func replyString(reply interface{}) (string, error) {
	switch v := reply.(type) {
	case []byte:
		return string(v), nil
	case string:
		return v, nil
	}
	return "", fmt.Errorf("redislock: unexpected reply %T, not a string", reply)
}

// replyFields reads a map reply (RESP3) or a flat name/value array (RESP2)
// by name; nil for a null reply.
func replyFields(reply interface{}) (map[string]interface{}, error) {
	switch v := reply.(type) {
	case nil:
		return nil, nil
	case map[string]interface{}:
		return v, nil
	case []interface{}:
		if len(v)%2 != 0 {
			return nil, fmt.Errorf("redislock: unexpected reply: an array of %d items, not name/value pairs", len(v))
		}
		fields := make(map[string]interface{}, len(v)/2)
		for i := 0; i < len(v); i += 2 {
			name, err := replyString(v[i])
			if err != nil {
				return nil, err
			}
			fields[name] = v[i+1]
		}
		return fields, nil
	}
	return nil, fmt.Errorf("redislock: unexpected reply %T, not a map", reply)
}

// fenceOf reads an ACQUIRE reply: [token, fence], or null (0, false).
func fenceOf(reply interface{}) (int64, bool, error) {
	if reply == nil {
		return 0, false, nil
	}
	pair, ok := reply.([]interface{})
	if !ok || len(pair) != 2 {
		return 0, false, fmt.Errorf("redislock: unexpected reply to an acquire: %T", reply)
	}
	fence, err := replyInt(pair[1])
	return fence, err == nil, err
}
