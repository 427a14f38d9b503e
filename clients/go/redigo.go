package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
)

// NewRedigo is the Driver over a redigo pool: each command on one of the
// pool's connections; a dedicated connection (for a WAIT or an OBSERVE)
// dialled with the pool's own DialContext (or Dial), outside the pool, and
// closed after use. The pool's read timeout bounds each command; a deadline
// on the context bounds it too. redigo never re-sends a command.
func NewRedigo(pool *redis.Pool) Driver {
	return redigoDriver{pool: pool}
}

type redigoDriver struct{ pool *redis.Pool }

func (d redigoDriver) Do(ctx context.Context, args ...interface{}) (interface{}, error) {
	timeout, err := timeoutOf(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := d.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return RedigoDo(conn, timeout, args...)
}

func (d redigoDriver) Dedicated(ctx context.Context, key string) (DedicatedConn, error) {
	var conn redis.Conn
	var err error
	switch {
	case d.pool.DialContext != nil:
		conn, err = d.pool.DialContext(ctx)
	case d.pool.Dial != nil:
		conn, err = dialWithin(ctx, d.pool.Dial)
	default:
		err = errors.New("redislock: the redigo pool has neither Dial nor DialContext")
	}
	if err != nil {
		return nil, err
	}
	return RedigoConn(conn), nil
}

// dialWithin runs dial, which takes no context, and gives up when ctx is
// done: a pool's Dial without a connect timeout would otherwise hold a wait
// or an observer past its caller's deadline (on a server that drops the
// connection's packets, for the system's connect timeout: minutes). A
// connection that comes after that is closed.
func dialWithin(ctx context.Context, dial func() (redis.Conn, error)) (redis.Conn, error) {
	if ctx.Done() == nil {
		return dial()
	}
	dialled := make(chan result, 1)
	go func() {
		conn, err := dial()
		dialled <- result{conn, err}
	}()
	select {
	case got := <-dialled:
		if got.err != nil {
			return nil, got.err
		}
		return got.reply.(redis.Conn), nil
	case <-ctx.Done():
		go func() {
			if got := <-dialled; got.err == nil {
				_ = got.reply.(redis.Conn).Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// RedigoConn is a DedicatedConn over one redigo connection (which must
// implement redis.ConnWithTimeout, as redigo's own do). Drivers for other
// redigo-based libraries can use it.
func RedigoConn(conn redis.Conn) DedicatedConn {
	return redigoConn{conn}
}

type redigoConn struct{ conn redis.Conn }

func (c redigoConn) Do(timeout time.Duration, args ...interface{}) (interface{}, error) {
	return RedigoDo(c.conn, timeout, args...)
}

func (c redigoConn) Close() error { return c.conn.Close() }

// RedigoDo sends args (the command's name first) on a redigo connection
// and returns the reply as a Driver must: the server's error replies as
// ServerError. timeout 0 is no read timeout; a negative one keeps the
// connection's own.
func RedigoDo(conn redis.Conn, timeout time.Duration, args ...interface{}) (interface{}, error) {
	if len(args) == 0 {
		return nil, invalidArgument("no command")
	}
	name, ok := args[0].(string)
	if !ok {
		return nil, invalidArgument(fmt.Sprintf("the command's name must be a string, not %T", args[0]))
	}
	var reply interface{}
	var err error
	if timeout >= 0 {
		reply, err = redis.DoWithTimeout(conn, timeout, name, args[1:]...)
	} else {
		reply, err = conn.Do(name, args[1:]...)
	}
	var serverErr redis.Error
	if errors.As(err, &serverErr) {
		return nil, ServerError(serverErr)
	}
	return reply, err
}

// timeoutOf is the read timeout a context's deadline leaves (-1: none, keep
// the connection's own), or the context's error when it is done.
func timeoutOf(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return -1, nil
	}
	left := time.Until(deadline)
	if left <= 0 {
		return 0, context.DeadlineExceeded
	}
	return left, nil
}

// ReadTimeout is the read timeout a context's deadline leaves for one
// command: -1 when it has none (keep the connection's own), or the
// context's error when it is done. For Drivers over redigo-based libraries.
func ReadTimeout(ctx context.Context) (time.Duration, error) { return timeoutOf(ctx) }
