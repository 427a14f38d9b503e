// Package cluster is the redislock Driver for Redis Cluster, over redisc
// (github.com/mna/redisc) and redigo.
//
// Every lock command has its key first, so redisc sends it to the master
// that owns the key's slot. A MOVED reply (a slot that moved) is followed
// after redisc updates its map, an ASK reply (a slot being migrated) with
// ASKING on the target, a TRYAGAIN after a short pause; at most three
// redirections per command. A fence is unique per master: fences of keys in
// different slots may come from different masters and are not comparable.
//
//	c := &redisc.Cluster{StartupNodes: []string{"127.0.0.1:7000"},
//		DialOptions: []redis.DialOption{redis.DialReadTimeout(5 * time.Second)}}
//	if err := c.Refresh(); err != nil { … }
//	locks := redislock.New(cluster.New(c))
package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/mna/redisc"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

const (
	maxRedirects  = 3
	tryAgainPause = 50 * time.Millisecond
)

// New is the Driver over a redisc cluster: commands on connections from
// c.Get, dedicated connections from c.Dial (never pooled), each bound to the
// key's master. Call c.Refresh first.
func New(c *redisc.Cluster) redislock.Driver {
	return driver{cluster: c}
}

type driver struct{ cluster *redisc.Cluster }

func (d driver) Do(ctx context.Context, args ...interface{}) (interface{}, error) {
	timeout, err := redislock.ReadTimeout(ctx)
	if err != nil {
		return nil, err
	}
	conn := &conn{cluster: d.cluster, get: func() (redis.Conn, error) { return d.cluster.Get(), nil }}
	defer conn.Close()
	return conn.Do(timeout, args...)
}

func (d driver) Dedicated(ctx context.Context, key string) (redislock.DedicatedConn, error) {
	c := &conn{cluster: d.cluster, get: d.cluster.Dial}
	first, err := d.cluster.Dial()
	if err != nil {
		return nil, err
	}
	if err := redisc.BindConn(first, key); err != nil {
		first.Close()
		return nil, err
	}
	c.current = first
	return c, nil
}

// conn follows redirections; Close may be called from another goroutine
// while Do blocks, and then makes it return.
type conn struct {
	cluster *redisc.Cluster
	get     func() (redis.Conn, error)

	mu      sync.Mutex
	current redis.Conn // bound to the key's master, made on first use
	ask     redis.Conn // the target of an ASK, for one command
	closed  bool
}

var errClosed = errors.New("redislock/cluster: connection closed")

func (c *conn) Do(timeout time.Duration, args ...interface{}) (interface{}, error) {
	defer c.endAsk()
	for redirects := 0; ; redirects++ {
		target, err := c.target()
		if err != nil {
			return nil, err
		}
		reply, err := redislock.RedigoDo(target, timeout, args...)
		var serverErr redislock.ServerError
		if !errors.As(err, &serverErr) || redirects >= maxRedirects {
			return reply, err
		}
		if redisc.IsTryAgain(redis.Error(serverErr)) {
			time.Sleep(tryAgainPause)
			continue
		}
		redir := redisc.ParseRedir(redis.Error(serverErr))
		if redir == nil {
			return reply, err
		}
		c.endAsk()
		if redir.Type == "MOVED" {
			// redisc has noted the slot's new master: a new connection goes there.
			c.drop()
			continue
		}
		// ASK: this one command goes to the slot's importing node, after ASKING.
		if err := c.dialAsk(redir.Addr); err != nil {
			return nil, err
		}
	}
}

// target is the ASK target during a redirection, else the bound connection.
func (c *conn) target() (redis.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if c.ask != nil {
		return c.ask, nil
	}
	if c.current == nil {
		conn, err := c.get()
		if err != nil {
			return nil, err
		}
		c.current = conn
	}
	return c.current, nil
}

// drop closes the bound connection, so that the next command makes one.
func (c *conn) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil {
		c.current.Close()
		c.current = nil
	}
}

func (c *conn) dialAsk(addr string) error {
	target, err := redis.Dial("tcp", addr, c.cluster.DialOptions...)
	if err != nil {
		return err
	}
	if _, err := target.Do("ASKING"); err != nil {
		target.Close()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		target.Close()
		return errClosed
	}
	c.ask = target
	return nil
}

func (c *conn) endAsk() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ask != nil {
		c.ask.Close()
		c.ask = nil
	}
}

func (c *conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.ask != nil {
		c.ask.Close()
		c.ask = nil
	}
	if c.current == nil {
		return nil
	}
	err := c.current.Close()
	c.current = nil
	return err
}
