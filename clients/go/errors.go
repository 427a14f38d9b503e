package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// The package's sentinel errors: test for them with errors.Is. No error of
// this package carries a token.
var (
	// ErrNotObtained: the lock (or the permits) could not be had: another
	// token holds it, others wait for it, or the wait ran out.
	ErrNotObtained = errors.New("redislock: not obtained")
	// ErrNotHeld: the server says this token does not hold the lock (or the
	// permits) now: released, expired, deleted or taken.
	ErrNotHeld = errors.New("redislock: the token does not hold the lock")
	// ErrLost: a lock was lost while it was held. Lock.Err returns a
	// *LostError, which is ErrLost.
	ErrLost = errors.New("redislock: lock lost")
	// ErrLimit: a LIMIT reply (lock.max-hold-ms, lock.max-extends,
	// lock.max-waiters, lock.max-holders). After a refused extend the lease
	// still holds until its current deadline.
	ErrLimit = errors.New("redislock: the server's limit refused")
	// ErrInvalidArgument: a bad argument, refused before anything was sent.
	ErrInvalidArgument = errors.New("redislock: invalid argument")
	// ErrRevoked: a lock was taken away on the server (LOCK.REVOKE, or its
	// session's lease ended by LOCK.LEASE REVOKE). A *LostError with
	// Reason LostRevoked is ErrRevoked, ErrLost and ErrNotHeld.
	ErrRevoked = errors.New("redislock: lock revoked")
	// ErrNotReplicated: a request made with Sync was answered NOSYNC: fewer
	// replicas than asked acknowledged it in time. From an acquire, nothing
	// is held (the server undid the grant); from an extend, the extension
	// stands on the master only. A *NotReplicatedError is ErrNotReplicated.
	ErrNotReplicated = errors.New("redislock: not replicated")
	// ErrModuleVersion: the server has no lock module, or one older than
	// this package needs (MinModuleVersion). A *ModuleVersionError is it.
	ErrModuleVersion = errors.New("redislock: unsupported lock module")
)

// NotReplicatedError is a NOSYNC reply: Acked of Wanted replicas
// acknowledged the request within its sync timeout. Undone says that the
// server gave the grant back (an acquire: the lock is not held).
type NotReplicatedError struct {
	Acked, Wanted int
	Undone        bool
	reply         ServerError
}

func (e *NotReplicatedError) Error() string        { return "redislock: " + string(e.reply) }
func (e *NotReplicatedError) Is(target error) bool { return target == ErrNotReplicated }
func (e *NotReplicatedError) Unwrap() error        { return e.reply }

// notReplicated reads a NOSYNC reply: "NOSYNC <acked> of <wanted> replicas
// acknowledged; <what stands>".
func notReplicated(reply ServerError) *NotReplicatedError {
	e := &NotReplicatedError{reply: reply}
	var rest string
	if n, _ := fmt.Sscanf(string(reply), "NOSYNC %d of %d replicas", &e.Acked, &e.Wanted); n == 2 {
		_, rest, _ = strings.Cut(string(reply), "; ")
	}
	e.Undone = strings.Contains(rest, "undone")
	return e
}

// ModuleVersionError: the server's lock module is missing (Found 0) or
// older than Needed, as MODULE LIST reports it (major*10000+minor*100+patch;
// builds before 0.4.0 report 1).
type ModuleVersionError struct {
	Found, Needed int64
}

func (e *ModuleVersionError) Error() string {
	if e.Found == 0 {
		return fmt.Sprintf("redislock: the server has no lock module (MODULE LIST); this client needs version %s or later", versionText(e.Needed))
	}
	return fmt.Sprintf("redislock: the server's lock module is version %s, older than %s that this client needs", versionText(e.Found), versionText(e.Needed))
}

func (e *ModuleVersionError) Is(target error) bool { return target == ErrModuleVersion }

// versionText is a MODULE LIST ver as major.minor.patch (1, what builds
// before 0.4.0 report, as "before 0.4.0").
func versionText(ver int64) string {
	if ver < 400 {
		return fmt.Sprintf("%d (before 0.4.0)", ver)
	}
	return fmt.Sprintf("%d.%d.%d (%d)", ver/10000, ver/100%100, ver%100, ver)
}

// LostReason says why a lock was lost.
type LostReason string

const (
	// LostRefused: the server said the token no longer holds the lock (an
	// extend answered 0, a guarded command LOST, WRONGTYPE on the lock key):
	// it was deleted, expired, overwritten with another type (SET) or taken.
	LostRefused LostReason = "refused"
	// LostExpired: the lease's deadline (less the safety margin) came with no
	// successful extend: the server is down, paused or unreachable.
	LostExpired LostReason = "expired"
	// LostLimit: the server's hold limit refused to extend the lease, and its
	// deadline (less the margin) came.
	LostLimit LostReason = "limit"
	// LostRevoked: the server took the lock away: an operator's
	// LOCK.REVOKE key (the LostError's Revoked is its REASON), or the
	// session's lease revoked (LOCK.LEASE REVOKE: "lease revoked").
	LostRevoked LostReason = "revoked"
)

// LostError is why a lock was lost. errors.Is(err, ErrLost) is true;
// errors.Is(err, ErrNotHeld) too when the server said so (LostRefused,
// LostRevoked); errors.Is(err, ErrRevoked) when it was revoked.
type LostError struct {
	Reason LostReason
	// Revoked is the server's reason text when Reason is LostRevoked (the
	// operator's REASON, or "lease revoked"), else "". Bytes outside
	// printable ASCII come as \xNN, as the server writes them.
	Revoked string
}

func (e *LostError) Error() string {
	switch e.Reason {
	case LostRefused:
		return "redislock: lock lost: the token no longer holds it (released, expired, deleted, overwritten or taken)"
	case LostLimit:
		return "redislock: lock lost: the server's hold limit refused to extend it, and its lease ended"
	case LostRevoked:
		return "redislock: lock lost: revoked: " + e.Revoked
	default:
		return "redislock: lock lost: its lease ended with no successful extend (server down or unreachable?)"
	}
}

// Is makes a LostError match ErrLost; ErrNotHeld when refused or revoked;
// ErrRevoked when revoked.
func (e *LostError) Is(target error) bool {
	switch target {
	case ErrLost:
		return true
	case ErrNotHeld:
		return e.Reason == LostRefused || e.Reason == LostRevoked
	case ErrRevoked:
		return e.Reason == LostRevoked
	}
	return false
}

// limitError is a LIMIT reply: ErrLimit, with the server's text.
type limitError struct{ reply ServerError }

func (e *limitError) Error() string        { return "redislock: " + string(e.reply) }
func (e *limitError) Is(target error) bool { return target == ErrLimit }
func (e *limitError) Unwrap() error        { return e.reply }

// timedOut: a wait that ran out. With the caller's deadline it is also
// context.DeadlineExceeded.
type timedOut struct{ byContext bool }

func (e *timedOut) Error() string {
	if e.byContext {
		return "redislock: not obtained: the context's deadline passed while waiting"
	}
	return "redislock: not obtained: the wait ran out"
}

func (e *timedOut) Is(target error) bool {
	return target == ErrNotObtained || (e.byContext && target == context.DeadlineExceeded)
}

type invalidArgument string

func (e invalidArgument) Error() string        { return "redislock: " + string(e) }
func (e invalidArgument) Is(target error) bool { return target == ErrInvalidArgument }

// classify turns LIMIT replies into ErrLimit and NOSYNC ones into
// ErrNotReplicated; other errors stay as they are.
func classify(err error) error {
	var reply ServerError
	if errors.As(err, &reply) {
		switch reply.Code() {
		case "LIMIT":
			return &limitError{reply}
		case "NOSYNC":
			return notReplicated(reply)
		}
	}
	return err
}

// refusal is the loss an error reply to a command on the lock key alone
// (an extend, a session's probe) says: LOST (the token no longer holds the
// lock), REVOKED <reason> (it was taken away), or WRONGTYPE (the key was
// overwritten with another type, a SET, which ended every hold of it: a
// refusal as a DEL is); nil for any other error.
func refusal(err error) *LostError {
	if lost := guardRefusal(err); lost != nil {
		return lost
	}
	if isWrongType(err) {
		return &LostError{Reason: LostRefused}
	}
	return nil
}

// isWrongType says whether err is a WRONGTYPE reply. From a command on the
// lock key alone, it means the key now holds another type; from a guarded
// command it may be that command's own (Lock.Guard tells them apart).
func isWrongType(err error) bool {
	var reply ServerError
	return errors.As(err, &reply) && reply.Code() == "WRONGTYPE"
}

// guardRefusal is the loss an error reply to a guarded command says: LOST
// or REVOKED <reason>, which only the lock's check answers; nil for any
// other error, the command's own among them.
func guardRefusal(err error) *LostError {
	var reply ServerError
	if !errors.As(err, &reply) {
		return nil
	}
	switch reply.Code() {
	case "LOST":
		return &LostError{Reason: LostRefused}
	case "REVOKED":
		reason := strings.TrimPrefix(string(reply), "REVOKED")
		return &LostError{Reason: LostRevoked, Revoked: strings.TrimPrefix(reason, " ")}
	}
	return nil
}

// isNoLease says whether err is a NOLEASE reply: the lease an acquire
// named is gone from the server (expired, revoked, another server's).
func isNoLease(err error) bool {
	var reply ServerError
	return errors.As(err, &reply) && reply.Code() == "NOLEASE"
}

// lacksLeases says whether a LOCK.LEASE GRANT's error means the server, or
// this connection's ACL user, has no LOCK.LEASE: a module without lease
// groups ("ERR unknown command …") or NOPERM.
func lacksLeases(err error) bool {
	var reply ServerError
	if !errors.As(err, &reply) {
		return false
	}
	return reply.Code() == "NOPERM" || strings.HasPrefix(string(reply), "ERR unknown command")
}
