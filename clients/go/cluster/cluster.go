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
// It is a redislock.Router too, so that a Client keeps one session lease
// per master: it reads the cluster's slot map (CLUSTER SLOTS) to know
// which master serves a key, and sends LOCK.LEASE (which has no key) to
// that master's address, on a connection from c.CreatePool's pool for it
// when c has one (closed by Close), else on one dialled for the command,
// as redisc itself does.
//
//	c := &redisc.Cluster{StartupNodes: []string{"127.0.0.1:7000"},
//		DialOptions: []redis.DialOption{redis.DialReadTimeout(5 * time.Second)}}
//	if err := c.Refresh(); err != nil { … }
//	locks := redislock.New(cluster.New(c))
package cluster

import (
	"context"
	"errors"
	"fmt"
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
// key's master; LOCK.LEASE on the master a Client's session lives on. Call
// c.Refresh first.
func New(c *redisc.Cluster) *Driver {
	return &Driver{cluster: c, pools: map[string]*redis.Pool{}}
}

// Driver is the redislock.Driver and redislock.Router over a redisc
// cluster.
type Driver struct {
	cluster *redisc.Cluster

	mu     sync.Mutex
	slots  []slotRange // the masters' slots, as CLUSTER SLOTS last said
	pools  map[string]*redis.Pool
	closed bool
}

type slotRange struct {
	first, last int
	addr        string
}

// Do sends one command on a connection bound to its key's master.
func (d *Driver) Do(ctx context.Context, args ...interface{}) (interface{}, error) {
	timeout, err := redislock.ReadTimeout(ctx)
	if err != nil {
		return nil, err
	}
	conn := &conn{cluster: d.cluster, get: func() (redis.Conn, error) { return d.cluster.Get(), nil }}
	defer conn.Close()
	return conn.Do(timeout, args...)
}

// Dedicated is a connection of its own to key's master.
func (d *Driver) Dedicated(ctx context.Context, key string) (redislock.DedicatedConn, error) {
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

// NodeOf is the address of the master that serves key, from the slot map
// this driver read last (read again with refresh, or the first time).
func (d *Driver) NodeOf(ctx context.Context, key string, refresh bool) (string, error) {
	d.mu.Lock()
	slots := d.slots
	d.mu.Unlock()
	if refresh || slots == nil {
		var err error
		if slots, err = d.readSlots(ctx); err != nil {
			return "", err
		}
	}
	slot := redisc.Slot(key)
	for _, r := range slots {
		if r.first <= slot && slot <= r.last {
			return r.addr, nil
		}
	}
	return "", fmt.Errorf("redislock/cluster: no master serves slot %d", slot)
}

// readSlots reads CLUSTER SLOTS from the first master it knows that
// answers (or a startup node), and keeps it. It asks the nodes directly:
// redisc's own map is left to redisc.
func (d *Driver) readSlots(ctx context.Context) ([]slotRange, error) {
	d.mu.Lock()
	var addrs []string
	for _, r := range d.slots {
		addrs = append(addrs, r.addr)
	}
	d.mu.Unlock()
	addrs = append(addrs, d.cluster.StartupNodes...)
	var ranges []interface{}
	err := errors.New("redislock/cluster: no startup node")
	tried := map[string]bool{}
	for _, addr := range addrs {
		if tried[addr] {
			continue
		}
		tried[addr] = true
		if ranges, err = redis.Values(d.DoOn(ctx, addr, "CLUSTER", "SLOTS")); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	slots := make([]slotRange, 0, len(ranges))
	for _, item := range ranges {
		fields, err := redis.Values(item, nil)
		if err != nil || len(fields) < 3 {
			return nil, fmt.Errorf("redislock/cluster: unexpected CLUSTER SLOTS entry: %v", err)
		}
		var r slotRange
		var master []interface{}
		if _, err := redis.Scan(fields, &r.first, &r.last, &master); err != nil {
			return nil, err
		}
		var host string
		var port int
		if _, err := redis.Scan(master, &host, &port); err != nil {
			return nil, err
		}
		r.addr = fmt.Sprintf("%s:%d", host, port)
		slots = append(slots, r)
	}
	d.mu.Lock()
	d.slots = slots
	d.mu.Unlock()
	return slots, nil
}

// DoOn sends one command to the master at node (an address NodeOf gave),
// with no redirection: LOCK.LEASE has no key.
func (d *Driver) DoOn(ctx context.Context, node string, args ...interface{}) (interface{}, error) {
	timeout, err := redislock.ReadTimeout(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := d.connTo(ctx, node)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return redislock.RedigoDo(conn, timeout, args...)
}

// connTo is a connection to addr: from the pool c.CreatePool makes for it,
// or dialled.
func (d *Driver) connTo(ctx context.Context, addr string) (redis.Conn, error) {
	if d.cluster.CreatePool == nil {
		return redis.DialContext(ctx, "tcp", addr, d.cluster.DialOptions...)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errClosed
	}
	pool := d.pools[addr]
	if pool == nil {
		var err error
		if pool, err = d.cluster.CreatePool(addr, d.cluster.DialOptions...); err != nil {
			d.mu.Unlock()
			return nil, err
		}
		d.pools[addr] = pool
	}
	d.mu.Unlock()
	return pool.GetContext(ctx)
}

// Close closes the pools DoOn made (not the redisc cluster's own).
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for addr, pool := range d.pools {
		pool.Close()
		delete(d.pools, addr)
	}
	return nil
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
