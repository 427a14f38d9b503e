//go:build go1.20

package redislock

// From Go 1.20, a lost lock's context carries the loss as its cause:
// context.Cause(lock.Context()) is the *LostError that Lock.Err returns
// (context.Canceled after a Release).

import "context"

// withCancelCause is context.WithCancelCause.
func withCancelCause(parent context.Context) (context.Context, func(cause error)) {
	return context.WithCancelCause(parent)
}
