package redislock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

type server struct {
	*testserver.Server
	t testing.TB
}

// startServer is a fresh server with the module for this test.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	return &server{testserver.Start(t, extra...), t}
}

func (s *server) do(args ...interface{}) interface{} { s.t.Helper(); return s.Do(args...) }
func (s *server) kill()                              { s.Kill() }
func (s *server) pause()                             { s.Pause() }

func (s *server) pool() *redis.Pool {
	pool := &redis.Pool{
		MaxIdle: 4,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", s.Addr(),
				redis.DialConnectTimeout(2*time.Second), redis.DialReadTimeout(2*time.Second))
		},
	}
	s.t.Cleanup(func() { pool.Close() })
	return pool
}

func (s *server) client(opts ...redislock.ClientOption) *redislock.Client {
	return redislock.New(redislock.NewRedigo(s.pool()), opts...)
}

// info is LOCK.INFO key's numbers (nil when free).
func (s *server) info(key string) map[string]int64 {
	s.t.Helper()
	reply, _ := s.do("LOCK.INFO", key).([]interface{})
	if reply == nil {
		return nil
	}
	fields := map[string]int64{}
	for i := 0; i+1 < len(reply); i += 2 {
		name, _ := redis.String(reply[i], nil)
		if n, err := redis.Int64(reply[i+1], nil); err == nil {
			fields[name] = n
		}
	}
	return fields
}

// queued is how many clients wait for key (LOCK.QUEUE).
func (s *server) queued(key string) int {
	s.t.Helper()
	waiters, _ := redis.Values(s.do("LOCK.QUEUE", key), nil)
	return len(waiters)
}

// calls is how many times the server ran command (INFO commandstats).
func (s *server) calls(command string) int64 {
	s.t.Helper()
	return statOf(s.do("INFO", "commandstats"), "cmdstat_"+command+":calls=")
}

// errors is how many error replies of code the server sent (INFO errorstats).
func (s *server) errors(code string) int64 {
	s.t.Helper()
	return statOf(s.do("INFO", "errorstats"), "errorstat_"+code+":count=")
}

func statOf(reply interface{}, prefix string) int64 {
	text, _ := redis.String(reply, nil)
	for _, line := range strings.Split(strings.ReplaceAll(text, "\r", ""), "\n") {
		if rest := strings.TrimPrefix(line, prefix); rest != line {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}

// observers is INFO lock's lock_observers: the blocked LOCK.OBSERVEs.
func observers(s *server) int64 { return s.Counter("lock", "lock_observers") }

// eventually waits (a generous, bounded while) for cond.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not true after 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// within waits for ch to give a value (or be closed), for a bounded while.
func within[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("not within 10 s: %s", what)
	}
	var zero T
	return zero
}

func bg() context.Context { return context.Background() }

func isUUIDv4(token string) bool {
	parts := strings.Split(token, "-")
	return len(token) == 36 && len(parts) == 5 && parts[2][0] == '4' && strings.ContainsRune("89ab", rune(parts[3][0]))
}
