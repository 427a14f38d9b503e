// Package testserver starts the servers the package's tests run against: a
// fresh server loading the freshly built module, on a free loopback port,
// killed at the end of the test (resumed first if paused), even when it
// fails; and a Redis Cluster of three such masters.
//
//	LOCK_MODULE       the module (default: target/debug/libredis_lock.so at the repository's root)
//	LOCK_TEST_SERVER  the server binary (default: redis-server)
package testserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Module is the module's path.
func Module(t testing.TB) string {
	if path := os.Getenv("LOCK_MODULE"); path != "" {
		return path
	}
	_, here, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(here), "../../../../target/debug/libredis_lock.so")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no module at %s: build it with `cargo build --locked --lib -p redis-lock`, or set LOCK_MODULE", path)
	}
	return path
}

// Binary is the server binary.
func Binary() string {
	if binary := os.Getenv("LOCK_TEST_SERVER"); binary != "" {
		return binary
	}
	return "redis-server"
}

// Server is one running server.
type Server struct {
	t    testing.TB
	Port int
	dir  string
	cmd  *exec.Cmd
}

// Addr is host:port.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

func freePort(t testing.TB) int {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port
}

// Start starts a server with the module; extra are more arguments.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	module := Module(t)
	var last string
	for attempt := 0; attempt < 5; attempt++ {
		s := &Server{t: t, Port: freePort(t), dir: t.TempDir()}
		args := append([]string{"--port", fmt.Sprint(s.Port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", s.dir, "--logfile", "server.log", "--loadmodule", module}, extra...)
		s.cmd = exec.Command(Binary(), args...)
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", Binary(), err)
		}
		if s.answers(5 * time.Second) {
			t.Cleanup(s.Kill)
			return s
		}
		last = s.log()
		s.Kill()
	}
	t.Fatalf("%s with %s did not start:\n%s", Binary(), module, last)
	return nil
}

func (s *Server) answers(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		conn, err := redis.Dial("tcp", s.Addr(), redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second))
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

func (s *Server) log() string {
	text, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return string(text)
}

// Kill kills the server (a paused one too).
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the process (SIGSTOP): it keeps its connections and answers
// nothing.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Do runs one command on a fresh connection and fails the test on an error.
func (s *Server) Do(args ...interface{}) interface{} {
	s.t.Helper()
	reply, err := s.TryDo(args...)
	if err != nil {
		s.t.Fatalf("%v: %v", args, err)
	}
	return reply
}

// TryDo runs one command on a fresh connection.
func (s *Server) TryDo(args ...interface{}) (interface{}, error) {
	conn, err := redis.Dial("tcp", s.Addr(), redis.DialReadTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.Do(args[0].(string), args[1:]...)
}

// Counter is a field of INFO's section (such as "lock", "lock_observers").
func (s *Server) Counter(section, field string) int64 {
	s.t.Helper()
	text, _ := redis.String(s.Do("INFO", section), nil)
	for _, line := range strings.Split(strings.ReplaceAll(text, "\r", ""), "\n") {
		var n int64
		if _, err := fmt.Sscanf(line, field+":%d", &n); err == nil {
			return n
		}
	}
	return -1
}

// Cluster starts three masters with cluster mode on and joins them with
// redis-cli --cluster create (no replicas: the tests are about routing).
func Cluster(t testing.TB) []*Server {
	t.Helper()
	var nodes []*Server
	create := []string{"--cluster", "create"}
	for i := 0; i < 3; i++ {
		node := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		nodes = append(nodes, node)
		create = append(create, node.Addr())
	}
	out, err := exec.Command("redis-cli", append(create, "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "[OK] All 16384 slots covered") {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, node := range nodes {
		for {
			state, _ := redis.String(node.TryDo("CLUSTER", "INFO"))
			if strings.Contains(state, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cluster is not ok after 30 s:\n%s", state)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}
