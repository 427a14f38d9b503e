// The nightly billing job with redis-lock from Go, over redigo
// (github.com/gomodule/redigo) and the raw commands, as docs/clients.md
// shows them.
//
// Several workers try to run the job at once; exactly one gets the lock
// (LOCK.ACQUIRE with a token it chose) and runs it, extending the lease
// after each invoice (LOCK.EXTEND) because the job outlasts the ttl, and
// releases it at the end (LOCK.RELEASE). Every ledger write carries the
// fence, and the ledger refuses stale fences. The day's total, a Redis key
// next to the lock (`{billing}:total:<night>`, the same hash tag), is
// written only under the lock, with LOCK.GUARD: a stale holder's write is
// refused by the server (`LOST`) and changes nothing. An auditor waits for
// the lock (LOCK.ACQUIRE … WAIT) on a connection of its own, and is handed
// the lock when the job releases it.
//
// Offline, from Debian's golang-go and golang-github-gomodule-redigo-dev
// (GOPATH mode; with modules, `go get github.com/gomodule/redigo` instead):
//
//	redis-server --port 6379 --loadmodule target/debug/libredis_lock.so &
//	REDIS_URL=redis://127.0.0.1:6379/ GO111MODULE=off GOPATH=/usr/share/gocode go run examples/go/billing.go
//
// Exits non-zero if the outcome is not the one described (CI runs it).
package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

const (
	ttl        = 600 * time.Millisecond // the job takes longer: the holder extends
	margin     = 100 * time.Millisecond // stop this long before the lease's end
	invoiceGap = 250 * time.Millisecond // the work before each invoice
	wait       = 5 * time.Second        // the auditor's WAIT
	workers    = 5
	nightTotal = 6000 // the sum of the invoices, in cents
)

var nights = []string{"2026-11-28", "2026-11-29"}

var invoices = []struct {
	customer string
	cents    int64
}{{"acme", 1000}, {"globex", 2000}, {"initech", 3000}}

// The lock key and the total key share the hash tag `{billing}`: in a
// cluster, LOCK.GUARD goes to the lock key's master, which must own the
// total too.
func lockKey(night string) string  { return "{billing}:nightly:" + night }
func totalKey(night string) string { return "{billing}:total:" + night }

// errLost: the lease is gone (an extend answered 0, the deadline passed, or
// a guarded command was refused with LOST); stop working.
var errLost = errors.New("the lease is lost")

// A lease on one key, on one connection (redigo's connections are not safe
// for concurrent use: one per goroutine, as one per process in real life).
type lease struct {
	conn       redis.Conn
	key, token string
	fence      int64
	validUntil time.Time // sent + ttl on the monotonic clock: never after the server's deadline
}

// newToken draws a UUIDv4: the token is always the client's, so that a lost
// reply can still be released or extended with it.
func newToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		log.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// acquire sends LOCK.ACQUIRE key ttl TOKEN <token> [WAIT ms]: a lease, or nil
// when another token holds the key (or the wait ran out). On an error (a
// timeout, a dropped connection) the lock may have been granted anyway: the
// caller releases with the token it chose, on another connection.
func acquire(conn redis.Conn, key string, token string, waitFor time.Duration) (*lease, error) {
	args := []interface{}{key, ttl.Milliseconds(), "TOKEN", token}
	if waitFor > 0 {
		args = append(args, "WAIT", waitFor.Milliseconds())
	}
	sent := time.Now() // carries a monotonic reading
	reply, err := redis.Values(conn.Do("LOCK.ACQUIRE", args...))
	if errors.Is(err, redis.ErrNil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fence, err := redis.Int64(reply[1], nil) // below 2^53
	if err != nil {
		return nil, err
	}
	return &lease{conn: conn, key: key, token: token, fence: fence, validUntil: sent.Add(ttl)}, nil
}

// extend sends LOCK.EXTEND key token ttl: 1 renews the lease from the send, 0
// means it is gone.
func (l *lease) extend() error {
	sent := time.Now()
	renewed, err := redis.Int(l.conn.Do("LOCK.EXTEND", l.key, l.token, ttl.Milliseconds()))
	if err != nil {
		return err
	}
	if renewed == 0 {
		return errLost
	}
	l.validUntil = sent.Add(ttl)
	return nil
}

// live says whether there is time left to work before the lease's end, with
// the margin.
func (l *lease) live() bool { return time.Until(l.validUntil) > margin }

// guard sends LOCK.GUARD key token command args...: the command's own reply,
// or errLost (wrapping the server's message) when the token no longer holds
// the lock, and then nothing ran.
func (l *lease) guard(command string, args ...interface{}) (interface{}, error) {
	reply, err := l.conn.Do("LOCK.GUARD", append([]interface{}{l.key, l.token, command}, args...)...)
	var serverErr redis.Error
	if errors.As(err, &serverErr) && strings.HasPrefix(string(serverErr), "LOST ") {
		return nil, fmt.Errorf("%w: %s", errLost, strings.TrimPrefix(string(serverErr), "LOST "))
	}
	return reply, err
}

// release sends LOCK.RELEASE key token: true released, false already gone.
func (l *lease) release() (bool, error) {
	return redis.Bool(l.conn.Do("LOCK.RELEASE", l.key, l.token))
}

// The ledger stands for the database the job writes to: it keeps the highest
// fence it has accepted and refuses any write with a lower one.
type ledger struct {
	mu           sync.Mutex
	highestFence int64
	invoices     map[string]int64 // "night customer" -> fence
}

func (g *ledger) writeInvoice(fence int64, night, customer string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if fence < g.highestFence {
		return fmt.Errorf("stale fence %d (seen %d): write refused", fence, g.highestFence)
	}
	g.highestFence = fence
	g.invoices[night+" "+customer] = fence
	return nil
}

func dial(options ...redis.DialOption) redis.Conn {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/"
	}
	conn, err := redis.DialURL(url, options...)
	if err != nil {
		log.Fatal(err)
	}
	return conn
}

// worker is one worker's run of the night's job: the fence if it ran it, 0
// if another worker holds the lock. It sends the fence on `acquired` when it
// gets the lock.
func worker(id int, night string, book *ledger, start <-chan struct{}, acquired chan<- int64) (int64, error) {
	conn := dial()
	defer conn.Close()
	<-start // all workers try at the same moment, as cron would start them
	held, err := acquire(conn, lockKey(night), newToken(), 0)
	if err != nil || held == nil {
		if err == nil {
			fmt.Printf("[%s] worker %d: another worker is running it, skipping\n", night, id)
		}
		return 0, err
	}
	acquired <- held.fence
	for _, invoice := range invoices {
		time.Sleep(invoiceGap) // three of them outlast the ttl: extend after each
		if !held.live() {
			return 0, fmt.Errorf("%w: the deadline passed", errLost)
		}
		if err := book.writeInvoice(held.fence, night, invoice.customer); err != nil {
			return 0, err
		}
		// Added to the total only if the lease is live on the server, in the
		// same atomic step as the check.
		if _, err := held.guard("INCRBY", totalKey(night), invoice.cents); err != nil {
			return 0, err
		}
		if err := held.extend(); err != nil {
			return 0, err
		}
	}
	if _, err := held.release(); err != nil {
		return 0, err
	}
	fmt.Printf("[%s] worker %d: ran the billing job with fence %d\n", night, id, held.fence)
	return held.fence, nil
}

// audit waits for the night's lock while the job holds it: on a connection of
// its own (LOCK.ACQUIRE … WAIT blocks the connection it runs on), whose read
// timeout is longer than the wait (redigo never retries). The job's release
// hands it the lock, with a larger fence; it then reads the total.
func audit(night string, jobFence int64) error {
	conn := dial(redis.DialReadTimeout(wait + 5*time.Second))
	defer conn.Close()
	started := time.Now()
	held, err := acquire(conn, lockKey(night), newToken(), wait)
	if err != nil {
		return err
	}
	if held == nil {
		return fmt.Errorf("[%s] auditor: not handed the lock within %v", night, wait)
	}
	if held.fence <= jobFence {
		return fmt.Errorf("[%s] auditor: fence %d is not above the job's %d", night, held.fence, jobFence)
	}
	total, err := redis.Int64(conn.Do("GET", totalKey(night)))
	if err != nil {
		return err
	}
	if _, err := held.release(); err != nil {
		return err
	}
	fmt.Printf("[%s] auditor: handed the lock on release after waiting %d ms, fence %d, total %d\n",
		night, time.Since(started).Milliseconds(), held.fence, total)
	return nil
}

// runNight starts the workers and, once one holds the lock, the auditor; the
// fence of the one worker that ran the job.
func runNight(book *ledger, night string) int64 {
	start := make(chan struct{})
	acquired := make(chan int64, workers)
	fences := make(chan int64, workers)
	var done sync.WaitGroup
	for id := 0; id < workers; id++ {
		done.Add(1)
		go func(id int) {
			defer done.Done()
			fence, err := worker(id, night, book, start, acquired)
			if err != nil {
				log.Fatalf("[%s] worker %d: %v", night, id, err)
			}
			fences <- fence
		}(id)
	}
	close(start)
	if err := audit(night, <-acquired); err != nil {
		log.Fatal(err)
	}
	done.Wait()
	close(fences)
	var ran []int64
	for fence := range fences {
		if fence != 0 {
			ran = append(ran, fence)
		}
	}
	if len(ran) != 1 {
		log.Fatalf("[%s] exactly one worker runs the job, not %d", night, len(ran))
	}
	return ran[0]
}

// staleHolder: a rerun of the night gets the lock with a short lease and
// stalls (a GC pause, a stopped VM) past it, without extending. When it wakes
// up, its guarded write to the total is refused by the server: nothing is
// written.
func staleHolder(conn redis.Conn, night string) {
	stale, err := acquire(conn, lockKey(night), newToken(), 0)
	if err != nil || stale == nil {
		log.Fatalf("the night's job is over, the lock is free: %v %v", stale, err)
	}
	time.Sleep(ttl + 200*time.Millisecond)
	_, err = stale.guard("INCRBY", totalKey(night), 999999)
	if !errors.Is(err, errLost) {
		log.Fatalf("a stale holder's guarded write must be refused with LOST, not %v", err)
	}
	fmt.Printf("stale guarded write to %s: refused, LOST (%v)\n", totalKey(night), err)
	if released, err := stale.release(); err != nil || released {
		log.Fatalf("the stale lease was gone: released %v, %v", released, err)
	}
}

func total(conn redis.Conn, night string) int64 {
	n, err := redis.Int64(conn.Do("GET", totalKey(night)))
	if err != nil {
		log.Fatal(err)
	}
	return n
}

func main() {
	conn := dial()
	defer conn.Close()
	// Start from no totals, so that the example can run again on one server.
	if _, err := conn.Do("DEL", totalKey(nights[0]), totalKey(nights[1])); err != nil {
		log.Fatal(err)
	}
	book := &ledger{invoices: map[string]int64{}}
	first := runNight(book, nights[0])
	second := runNight(book, nights[1])
	if second <= first {
		log.Fatalf("the later holder has the larger fence: %d then %d", first, second)
	}
	staleHolder(conn, nights[1])
	if err := book.writeInvoice(first, nights[1], "acme"); err != nil {
		fmt.Printf("late write with fence %d: %v\n", first, err)
	} else {
		log.Fatal("a stale fence must be refused")
	}
	for _, night := range nights {
		if got := total(conn, night); got != nightTotal {
			log.Fatalf("total of %s is %d, not %d", night, got, nightTotal)
		}
		fmt.Printf("total %s: %d\n", totalKey(night), nightTotal)
	}
	fmt.Println("go billing example: ok")
}
