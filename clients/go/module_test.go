package redislock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

// fakeModules answers MODULE LIST with modules, and counts the calls.
type fakeModules struct {
	modules interface{}
	calls   int
}

func (f *fakeModules) Do(ctx context.Context, args ...interface{}) (interface{}, error) {
	f.calls++
	if args[0] == "MODULE" {
		return f.modules, nil
	}
	return nil, nil
}

func (f *fakeModules) Dedicated(ctx context.Context, key string) (DedicatedConn, error) {
	return nil, errors.New("none")
}

func module(name string, ver int64) interface{} {
	return []interface{}{[]byte("name"), []byte(name), []byte("ver"), ver, []byte("path"), []byte("/x.so"), []byte("args"), []interface{}{}}
}

func TestAnOldOrMissingModuleIsRefusedNamingBothVersions(t *testing.T) {
	for _, tc := range []struct {
		modules interface{}
		found   int64
		says    []string
	}{
		{[]interface{}{module("lock", 1)}, 1, []string{"1 (before 0.4.0)", "0.4.0 (400)"}},
		{[]interface{}{module("lock", 399)}, 399, []string{"399", "0.4.0 (400)"}},
		{[]interface{}{module("search", 20000)}, 0, []string{"no lock module", "0.4.0 (400)"}},
		{[]interface{}{}, 0, []string{"no lock module"}},
	} {
		driver := &fakeModules{modules: tc.modules}
		client := New(driver)
		_, err := client.Obtain(context.Background(), "k", time.Second)
		var refused *ModuleVersionError
		if !errors.Is(err, ErrModuleVersion) || !errors.As(err, &refused) || refused.Found != tc.found || refused.Needed != 400 {
			t.Fatalf("%v: want a *ModuleVersionError found %d, got %v", tc.modules, tc.found, err)
		}
		for _, part := range tc.says {
			if !strings.Contains(err.Error(), part) {
				t.Fatalf("%q does not say %q", err, part)
			}
		}
		if driver.calls != 1 {
			t.Fatalf("a refused server was sent %d commands, want MODULE LIST only", driver.calls)
		}
	}
}

func TestTheModuleIsCheckedOncePerClient(t *testing.T) {
	driver := &fakeModules{modules: []interface{}{module("other", 5), map[string]interface{}{"name": "lock", "ver": int64(10203)}}}
	client := New(driver, WithKeepAlive(KeepAliveWatchdog))
	for i := 0; i < 3; i++ {
		if _, err := client.Info(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	if driver.calls != 4 { // one MODULE LIST, three LOCK.INFO
		t.Fatalf("want one MODULE LIST for three commands, got %d calls", driver.calls)
	}
}

func TestTheRealModulePassesAndReleaseCountsEveryKey(t *testing.T) {
	s := testserver.Start(t)
	client := New(NewRedigo(redisPool(s.Addr())))
	if err := client.checkModule(context.Background(), "k"); err != nil {
		t.Fatalf("the module built here: %v", err)
	}
	lock, err := client.ObtainMany(context.Background(), []string{"{r}a", "{r}b", "{r}c"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.Do("DEL", "{r}b")
	n, err := lock.release(context.Background())
	if !errors.Is(err, ErrNotHeld) || n != 2 {
		t.Fatalf("MRELEASE after a DEL of one of three keys: want 2, got %d, %v", n, err)
	}
}

func redisPool(addr string) *redis.Pool {
	return &redis.Pool{
		MaxIdle: 2,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(2*time.Second), redis.DialReadTimeout(2*time.Second))
		},
	}
}
