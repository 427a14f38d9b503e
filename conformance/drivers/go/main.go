// The conformance driver of the Go package (clients/go): speaks the
// protocol of conformance/PROTOCOL.md on stdin and stdout, and maps each
// command onto the package's public API only, as a user would. Loss events
// come from each lock's own Lost channel and Err.
//
// Offline, from Debian's golang-go with redigo and redisc
// (clients/go/vendor.sh links them into vendor/); conformance/run.py builds
// and runs it:
//
//	bash clients/go/vendor.sh conformance/drivers/go
//	cd conformance/drivers/go && GOFLAGS=-mod=vendor GOPROXY=off go build -o go-driver .
//	./go-driver redis://127.0.0.1:6379
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// command is one line of the harness; fields unused by an op stay zero.
type command struct {
	Op      string        `json:"op"`
	Re      string        `json:"re"`
	Name    string        `json:"name"`
	Keys    []string      `json:"keys"`
	TTLMs   int64         `json:"ttl_ms"`
	Mode    string        `json:"mode"`
	WaitMs  *int64        `json:"wait_ms"`
	Sync    []int64       `json:"sync"`
	Command []interface{} `json:"command"`
}

// out writes one JSON line at a time: replies and events come from many
// goroutines.
type out struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (o *out) emit(v map[string]interface{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.enc.Encode(v); err != nil {
		log.Printf("stdout: %v", err)
	}
}

// entry is what the driver knows of one name: the acquire's cancel while
// it runs, then its lock.
type entry struct {
	mu       sync.Mutex
	cancel   context.CancelFunc
	lock     *redislock.Lock
	released bool
}

type driver struct {
	out      *out
	session  *redislock.Client
	watchdog *redislock.Client

	mu    sync.Mutex
	names map[string]*entry
}

func main() {
	log.SetFlags(log.Lmicroseconds)
	log.SetPrefix("go-driver: ")
	if len(os.Args) != 2 {
		log.Fatal("usage: go-driver redis://host:port")
	}
	address, err := hostPort(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	// The pool as docs/clients/go.md's example sets it up: connect, read
	// and write timeouts on every connection.
	pool := &redis.Pool{
		MaxIdle: 4,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", address,
				redis.DialConnectTimeout(2*time.Second),
				redis.DialReadTimeout(5*time.Second),
				redis.DialWriteTimeout(5*time.Second))
		},
	}
	defer pool.Close()
	d := &driver{
		out:      &out{enc: json.NewEncoder(os.Stdout)},
		session:  redislock.New(redislock.NewRedigo(pool), redislock.WithKeepAlive(redislock.KeepAliveSession)),
		watchdog: redislock.New(redislock.NewRedigo(pool), redislock.WithKeepAlive(redislock.KeepAliveWatchdog)),
		names:    map[string]*entry{},
	}
	d.out.emit(map[string]interface{}{"ev": "ready"})
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		var cmd command
		if err := json.Unmarshal(scanner.Bytes(), &cmd); err != nil {
			log.Printf("bad line %q: %v", scanner.Text(), err)
			continue
		}
		if cmd.Op == "quit" {
			d.out.emit(map[string]interface{}{"re": cmd.Re, "ev": "bye"})
			return
		}
		go d.handle(cmd)
	}
}

func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("not a redis:// url: %q", raw)
	}
	return u.Host, nil
}

func (d *driver) handle(cmd command) {
	switch cmd.Op {
	case "acquire":
		d.acquire(cmd)
	case "release":
		d.release(cmd)
	case "guard":
		d.guard(cmd)
	case "held":
		d.held(cmd)
	case "cancel":
		d.cancel(cmd)
	default:
		d.fail(cmd, "invalid", "unknown op "+cmd.Op)
	}
}

func (d *driver) fail(cmd command, kind, message string) {
	d.out.emit(map[string]interface{}{"re": cmd.Re, "ev": "error", "name": cmd.Name, "kind": kind, "message": message})
}

func (d *driver) lookup(cmd command) *entry {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.names[cmd.Name]
	if e == nil {
		d.out.emit(map[string]interface{}{"re": cmd.Re, "ev": "error", "name": cmd.Name, "kind": "invalid", "message": "unknown name"})
	}
	return e
}

func (d *driver) acquire(cmd command) {
	if len(cmd.Keys) == 0 {
		d.fail(cmd, "invalid", "no keys")
		return
	}
	if cmd.Sync != nil && len(cmd.Sync) != 2 {
		d.fail(cmd, "invalid", "sync is [numreplicas, timeout_ms]")
		return
	}
	client := d.session
	switch cmd.Mode {
	case "", "session":
	case "watchdog":
		client = d.watchdog
	default:
		d.fail(cmd, "invalid", "unknown mode "+cmd.Mode)
		return
	}
	var opts []redislock.Option
	if cmd.WaitMs != nil {
		opts = append(opts, redislock.Wait(time.Duration(*cmd.WaitMs)*time.Millisecond))
	}
	if cmd.Sync != nil {
		opts = append(opts, redislock.Sync(int(cmd.Sync[0]), time.Duration(cmd.Sync[1])*time.Millisecond))
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &entry{cancel: cancel}
	d.mu.Lock()
	if d.names[cmd.Name] != nil {
		d.mu.Unlock()
		cancel()
		d.fail(cmd, "invalid", "name already used")
		return
	}
	d.names[cmd.Name] = e
	d.mu.Unlock()

	ttl := time.Duration(cmd.TTLMs) * time.Millisecond
	var lock *redislock.Lock
	var err error
	if len(cmd.Keys) == 1 {
		lock, err = client.Obtain(ctx, cmd.Keys[0], ttl, opts...)
	} else {
		lock, err = client.ObtainMany(ctx, cmd.Keys, ttl, opts...)
	}
	if err != nil {
		if errors.Is(err, redislock.ErrNotObtained) {
			d.out.emit(map[string]interface{}{"re": cmd.Re, "ev": "not_acquired", "name": cmd.Name})
			return
		}
		kind, message := classify(err)
		d.fail(cmd, kind, message)
		return
	}
	e.mu.Lock()
	e.lock = lock
	e.mu.Unlock()
	d.out.emit(map[string]interface{}{"re": cmd.Re, "ev": "acquired", "name": cmd.Name, "fence": lock.Fence()})
	go func() {
		<-lock.Lost()
		reason, revoked := lostOf(lock.Err())
		d.out.emit(map[string]interface{}{"ev": "lost", "name": cmd.Name, "reason": reason, "revoked_reason": revoked})
	}()
}

// lostOf is the protocol's reason (and revoked text) of a lock's Err.
func lostOf(err error) (string, interface{}) {
	var lost *redislock.LostError
	if !errors.As(err, &lost) {
		return "unknown", nil
	}
	if lost.Reason == redislock.LostRevoked {
		return string(lost.Reason), lost.Revoked
	}
	return string(lost.Reason), nil
}

// classify is the protocol's error kind of an error of the package.
func classify(err error) (string, string) {
	var lost *redislock.LostError
	var reply redislock.ServerError
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled", err.Error()
	case errors.As(err, &lost):
		if lost.Reason == redislock.LostRevoked {
			return "revoked", err.Error()
		}
		return "lost", err.Error()
	case errors.Is(err, redislock.ErrLimit):
		return "limit", err.Error()
	case errors.Is(err, redislock.ErrNotReplicated):
		return "nosync", err.Error()
	case errors.As(err, &reply):
		switch reply.Code() {
		case "WRONGTYPE":
			return "wrongtype", err.Error()
		case "NOSYNC":
			return "nosync", err.Error()
		}
		return "server", err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout", err.Error()
	}
	return "connection", err.Error()
}

func (d *driver) release(cmd command) {
	e := d.lookup(cmd)
	if e == nil {
		return
	}
	e.mu.Lock()
	lock := e.lock
	e.mu.Unlock()
	if lock == nil {
		d.fail(cmd, "invalid", "not acquired")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := lock.Release(ctx)
	if err == nil || errors.Is(err, redislock.ErrNotHeld) {
		e.mu.Lock()
		e.released = true
		e.mu.Unlock()
		d.out.emit(map[string]interface{}{"re": cmd.Re, "ev": "released", "name": cmd.Name, "result": err == nil})
		return
	}
	kind, message := classify(err)
	d.fail(cmd, kind, message)
}

func (d *driver) guard(cmd command) {
	e := d.lookup(cmd)
	if e == nil {
		return
	}
	e.mu.Lock()
	lock := e.lock
	e.mu.Unlock()
	if lock == nil || len(cmd.Command) == 0 {
		d.fail(cmd, "invalid", "not acquired, or no command")
		return
	}
	name, ok := cmd.Command[0].(string)
	if !ok {
		d.fail(cmd, "invalid", "the command's name is not a string")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := lock.Guard(ctx, name, cmd.Command[1:]...)
	if err != nil {
		kind, message := classify(err)
		d.fail(cmd, kind, message)
		return
	}
	d.out.emit(map[string]interface{}{"re": cmd.Re, "ev": "guarded", "name": cmd.Name, "reply": toJSON(reply)})
}

// toJSON turns a redigo reply into what encoding/json writes as the
// protocol wants it ([]byte as a string).
func toJSON(reply interface{}) interface{} {
	switch v := reply.(type) {
	case []byte:
		return string(v)
	case []interface{}:
		items := make([]interface{}, len(v))
		for i, item := range v {
			items[i] = toJSON(item)
		}
		return items
	}
	return reply
}

func (d *driver) held(cmd command) {
	e := d.lookup(cmd)
	if e == nil {
		return
	}
	e.mu.Lock()
	lock, released := e.lock, e.released
	e.mu.Unlock()
	if lock == nil {
		d.fail(cmd, "invalid", "not acquired")
		return
	}
	err := lock.Err()
	var reason interface{}
	if err != nil {
		reason, _ = lostOf(err)
	}
	d.out.emit(map[string]interface{}{"re": cmd.Re, "ev": "held", "name": cmd.Name, "held": err == nil && !released, "reason": reason})
}

func (d *driver) cancel(cmd command) {
	e := d.lookup(cmd)
	if e == nil {
		return
	}
	e.cancel()
	d.out.emit(map[string]interface{}{"re": cmd.Re, "ev": "cancelled", "name": cmd.Name})
}
