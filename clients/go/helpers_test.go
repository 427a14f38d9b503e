package redislock_test

// A fresh server with the module for each test, on a free loopback port,
// killed at the end (resumed first if paused), even when the test fails.
//   LOCK_MODULE       the module (default: ../../target/debug/libredis_lock.so)
//   LOCK_TEST_SERVER  the server binary (default: redis-server)

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

func modulePath(t testing.TB) string {
	if path := os.Getenv("LOCK_MODULE"); path != "" {
		return path
	}
	path, err := filepath.Abs("../../target/debug/libredis_lock.so")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no module at %s: build it with `cargo build --locked --lib -p redis-lock`, or set LOCK_MODULE", path)
	}
	return path
}

func serverBinary() string {
	if binary := os.Getenv("LOCK_TEST_SERVER"); binary != "" {
		return binary
	}
	return "redis-server"
}

type server struct {
	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func freePort(t testing.TB) int {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port
}

// startServer starts a server with the module; extra are more arguments.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	module := modulePath(t)
	var last string
	for attempt := 0; attempt < 5; attempt++ {
		s := &server{t: t, port: freePort(t), dir: t.TempDir()}
		args := append([]string{"--port", fmt.Sprint(s.port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", s.dir, "--logfile", "server.log", "--loadmodule", module}, extra...)
		s.cmd = exec.Command(serverBinary(), args...)
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", serverBinary(), err)
		}
		if s.answers(5 * time.Second) {
			t.Cleanup(s.kill)
			return s
		}
		s.kill()
		last = s.log()
	}
	t.Fatalf("%s with %s did not start:\n%s", serverBinary(), module, last)
	return nil
}

func (s *server) answers(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		conn, err := redis.Dial("tcp", s.addr(), redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second))
		if err == nil {
			pong, err := redis.String(conn.Do("PING"))
			conn.Close()
			if err == nil && pong == "PONG" {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func (s *server) log() string {
	text, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return string(text)
}

func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *server) pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// conn is a plain connection for looking at the server from outside.
func (s *server) conn() redis.Conn {
	s.t.Helper()
	conn, err := redis.Dial("tcp", s.addr(), redis.DialReadTimeout(5*time.Second))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return conn
}

// do runs one command on a fresh connection and fails the test on an error.
func (s *server) do(args ...interface{}) interface{} {
	s.t.Helper()
	conn, err := redis.Dial("tcp", s.addr(), redis.DialReadTimeout(5*time.Second))
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close()
	reply, err := conn.Do(args[0].(string), args[1:]...)
	if err != nil {
		s.t.Fatalf("%v: %v", args, err)
	}
	return reply
}

func (s *server) pool() *redis.Pool {
	pool := &redis.Pool{
		MaxIdle: 4,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", s.addr(),
				redis.DialConnectTimeout(2*time.Second), redis.DialReadTimeout(2*time.Second))
		},
	}
	s.t.Cleanup(func() { pool.Close() })
	return pool
}

func (s *server) client(opts ...redislock.ClientOption) *redislock.Client {
	return redislock.New(redislock.NewRedigo(s.pool()), opts...)
}

// info is LOCK.INFO key as a map (nil when free).
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

// within waits for ch to be closed (or to give a value), for a bounded while.
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

func splitLines(text string) []string { return strings.Split(strings.ReplaceAll(text, "\r", ""), "\n") }

func fmtSscanf(line, format string, n *int) (int, error) { return fmt.Sscanf(line, format, n) }
