package redislock

import (
	"context"
	"fmt"
	"time"
)

// Semaphore is a counting semaphore on one key: at most Limit permits out at
// once (SEM.*). Every user of a key must give the same limit; the server
// refuses another (a ServerError, "ERR limit differs …").
type Semaphore struct {
	client *Client
	key    string
	limit  int
}

// Semaphore is the semaphore key with limit permits (1 to 1,000,000).
func (c *Client) Semaphore(key string, limit int) *Semaphore {
	return &Semaphore{client: c, key: key, limit: limit}
}

// Acquire takes Count(n) permits (default 1) under one token for ttl, as a
// Lock kept alive as Obtain's are (the Session, or a watchdog's
// SEM.EXTEND), with the same Context, Lost and Release
// (SEM.RELEASE, which hands them to the head of the queue). ErrNotObtained
// when fewer are free or others wait (with Wait: when the wait ran out); the
// server's queue is fair across counts. Options: Count, Wait, Owner,
// WithoutWatchdog.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...Option) (*Lock, error) {
	if s.limit < 1 || s.limit > MaxSemaphoreLimit {
		return nil, invalidArgument(fmt.Sprintf("limit must be 1 to %d, not %d", MaxSemaphoreLimit, s.limit))
	}
	o := collect(opts)
	if o.count == 0 {
		o.count = 1
	}
	if o.count < 1 || o.count > s.limit {
		return nil, invalidArgument(fmt.Sprintf("count must be 1 to the limit (%d), not %d", s.limit, o.count))
	}
	req, err := newRequest(permits, s.key, ttl, o)
	if err != nil {
		return nil, err
	}
	req.limit = s.limit
	return s.client.acquire(ctx, req)
}

// SemaphoreInfo is SEM.INFO.
type SemaphoreInfo struct {
	Limit    int64         // the semaphore's limit
	Used     int64         // permits out
	Holders  int64         // tokens holding permits
	Waiters  int64         // clients waiting in the queue
	Fence    int64         // the highest fence
	TTL      time.Duration // left in the latest lease
	Deadline time.Time     // the end of the latest lease
}

// Info is SEM.INFO: nil when nobody holds a permit.
func (s *Semaphore) Info(ctx context.Context) (*SemaphoreInfo, error) {
	reply, err := s.client.driver.Do(ctx, "SEM.INFO", s.key)
	if err != nil {
		return nil, err
	}
	fields, err := replyFields(reply)
	if fields == nil || err != nil {
		return nil, err
	}
	info := &SemaphoreInfo{}
	for name, value := range fields {
		n, err := replyInt(value)
		if err != nil {
			continue // a field of text, unknown to this version
		}
		switch name {
		case "limit":
			info.Limit = n
		case "used":
			info.Used = n
		case "holders":
			info.Holders = n
		case "waiters":
			info.Waiters = n
		case "fence":
			info.Fence = n
		case "ttl":
			info.TTL = durationOrNone(n)
		case "deadline":
			info.Deadline = unixMs(n)
		}
	}
	return info, nil
}
