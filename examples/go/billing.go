// The nightly billing job with redis-lock from Go, with the package
// github.com/redis-lock/redis-lock/clients/go (clients/go, over redigo).
//
// Several workers try to run the job at once; exactly one gets the lock
// (Obtain) and runs it, the client's session keeping the lease alive (one
// LOCK.LEASE KEEPALIVE for all of the client's holds) while the job
// outlasts the ttl, and releases it at the end. Every ledger write carries
// the fence, and the ledger refuses stale fences. The day's total, a Redis key
// next to the lock (`{billing}:total:<night>`, the same hash tag), is written
// only under the lock, with Guard (LOCK.GUARD): a stale holder's write is
// refused by the server (`LOST`) and changes nothing. An auditor waits for the
// lock (Obtain with Wait, on a connection of its own), and is handed the lock
// when the job releases it.
//
// Offline, from Debian's golang-go, golang-github-gomodule-redigo-dev and
// golang-github-mna-redisc-dev (clients/go/vendor.sh links them into vendor/):
//
//	redis-server --port 6379 --loadmodule target/debug/libredis_lock.so &
//	cd examples/go && ../../clients/go/vendor.sh . && REDIS_URL=redis://127.0.0.1:6379/ go run .
//
// Exits non-zero if the outcome is not the one described (CI runs it).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

const (
	ttl        = 600 * time.Millisecond // the job takes longer: the session keeps it
	invoiceGap = 250 * time.Millisecond // the work before each invoice
	wait       = 5 * time.Second        // the auditor's wait
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

// worker is one worker's run of the night's job: the fence if it ran it, 0
// if another worker holds the lock. It sends the fence on `acquired` when it
// gets the lock.
func worker(locks *redislock.Client, id int, night string, book *ledger, start <-chan struct{}, acquired chan<- int64) (int64, error) {
	<-start // all workers try at the same moment, as cron would start them
	ctx := context.Background()
	lock, err := locks.Obtain(ctx, lockKey(night), ttl)
	if errors.Is(err, redislock.ErrNotObtained) {
		fmt.Printf("[%s] worker %d: another worker is running it, skipping\n", night, id)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer lock.Release(ctx) // a no-op (ErrNotHeld) after the Release below
	acquired <- lock.Fence()
	for _, invoice := range invoices {
		select { // three of them outlast the ttl: the session keeps the lease alive
		case <-time.After(invoiceGap):
		case <-lock.Context().Done():
			return 0, lock.Err() // lost: stop working
		}
		if err := book.writeInvoice(lock.Fence(), night, invoice.customer); err != nil {
			return 0, err
		}
		// Added to the total only if the lease is live on the server, in the
		// same atomic step as the check.
		if _, err := lock.Guard(ctx, "INCRBY", totalKey(night), invoice.cents); err != nil {
			return 0, err
		}
	}
	if err := lock.Release(ctx); err != nil {
		return 0, err
	}
	fmt.Printf("[%s] worker %d: ran the billing job with fence %d\n", night, id, lock.Fence())
	return lock.Fence(), nil
}

// audit waits for the night's lock while the job holds it, in the server's
// queue: the job's release hands it the lock, with a larger fence. It then
// reads the total.
func audit(locks *redislock.Client, pool *redis.Pool, night string, jobFence int64) error {
	ctx := context.Background()
	started := time.Now()
	lock, err := locks.Obtain(ctx, lockKey(night), ttl, redislock.Wait(wait))
	if errors.Is(err, redislock.ErrNotObtained) {
		return fmt.Errorf("[%s] auditor: not handed the lock within %v", night, wait)
	}
	if err != nil {
		return err
	}
	if lock.Fence() <= jobFence {
		return fmt.Errorf("[%s] auditor: fence %d is not above the job's %d", night, lock.Fence(), jobFence)
	}
	total, err := getTotal(pool, night)
	if err != nil {
		return err
	}
	if err := lock.Release(ctx); err != nil {
		return err
	}
	fmt.Printf("[%s] auditor: handed the lock on release after waiting %d ms, fence %d, total %d\n",
		night, time.Since(started).Milliseconds(), lock.Fence(), total)
	return nil
}

// runNight starts the workers and, once one holds the lock, the auditor; the
// fence of the one worker that ran the job.
func runNight(locks *redislock.Client, pool *redis.Pool, book *ledger, night string) int64 {
	start := make(chan struct{})
	acquired := make(chan int64, workers)
	fences := make(chan int64, workers)
	var done sync.WaitGroup
	for id := 0; id < workers; id++ {
		done.Add(1)
		go func(id int) {
			defer done.Done()
			fence, err := worker(locks, id, night, book, start, acquired)
			if err != nil {
				log.Fatalf("[%s] worker %d: %v", night, id, err)
			}
			fences <- fence
		}(id)
	}
	close(start)
	if err := audit(locks, pool, night, <-acquired); err != nil {
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

// staleHolder: a rerun of the night gets the lock with a short lease kept
// alive by nothing (WithoutWatchdog: no session, no watchdog), and stalls
// (a GC pause, a stopped VM) past it. When it wakes up, its guarded write
// to the total is refused by the server: nothing is written.
func staleHolder(locks *redislock.Client, night string) {
	ctx := context.Background()
	stale, err := locks.Obtain(ctx, lockKey(night), ttl, redislock.WithoutWatchdog())
	if err != nil {
		log.Fatalf("the night's job is over, the lock is free: %v", err)
	}
	time.Sleep(ttl + 200*time.Millisecond)
	_, err = stale.Guard(ctx, "INCRBY", totalKey(night), 999999)
	if !errors.Is(err, redislock.ErrLost) {
		log.Fatalf("a stale holder's guarded write must be refused with LOST, not %v", err)
	}
	fmt.Printf("stale guarded write to %s: refused, LOST (%v)\n", totalKey(night), err)
	if err := stale.Release(ctx); !errors.Is(err, redislock.ErrNotHeld) {
		log.Fatalf("the stale lease was gone: %v", err)
	}
}

func getTotal(pool *redis.Pool, night string) (int64, error) {
	conn := pool.Get()
	defer conn.Close()
	return redis.Int64(conn.Do("GET", totalKey(night)))
}

func main() {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/"
	}
	pool := &redis.Pool{
		MaxIdle: workers + 2,
		Dial:    func() (redis.Conn, error) { return redis.DialURL(url, redis.DialReadTimeout(2*time.Second)) },
	}
	defer pool.Close()
	locks := redislock.New(redislock.NewRedigo(pool))
	// Start from no totals, so that the example can run again on one server.
	conn := pool.Get()
	if _, err := conn.Do("DEL", totalKey(nights[0]), totalKey(nights[1])); err != nil {
		log.Fatal(err)
	}
	conn.Close()
	book := &ledger{invoices: map[string]int64{}}
	first := runNight(locks, pool, book, nights[0])
	second := runNight(locks, pool, book, nights[1])
	if second <= first {
		log.Fatalf("the later holder has the larger fence: %d then %d", first, second)
	}
	staleHolder(locks, nights[1])
	if err := book.writeInvoice(first, nights[1], "acme"); err != nil {
		fmt.Printf("late write with fence %d: %v\n", first, err)
	} else {
		log.Fatal("a stale fence must be refused")
	}
	for _, night := range nights {
		got, err := getTotal(pool, night)
		if err != nil {
			log.Fatal(err)
		}
		if got != nightTotal {
			log.Fatalf("total of %s is %d, not %d", night, got, nightTotal)
		}
		fmt.Printf("total %s: %d\n", totalKey(night), got)
	}
	fmt.Println("go billing example: ok")
}
