//go:build !go1.20

package redislock

// Before Go 1.20 a context has no cause: Lock.Err says why it was lost.

import "context"

// withCancelCause is context.WithCancel; the cause is dropped.
func withCancelCause(parent context.Context) (context.Context, func(cause error)) {
	ctx, cancel := context.WithCancel(parent)
	return ctx, func(error) { cancel() }
}
