package redislock

// The check that the server's lock module is one this package can drive:
// MODULE LIST's ver of the module named "lock" (major*10000 + minor*100 +
// patch; builds before 0.4.0 report 1), asked once per Client, on its first
// command. A transport error is not remembered: the next command asks
// again. An ACL user refused MODULE LIST (NOPERM) cannot tell: the check is
// skipped rather than locking such a user out.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MinModuleVersion is the oldest lock module this package drives, as
// MODULE LIST reports it: 0.4.0, which has SYNC, LOCK.MACQUIRE and
// reports its version.
const MinModuleVersion = 400

// moduleCheckTimeout bounds MODULE LIST when the caller's context has no
// deadline.
const moduleCheckTimeout = 5 * time.Second

// checkModule refuses, with a *ModuleVersionError, a server whose lock
// module is missing or older than MinModuleVersion; once it passed, it
// sends nothing again. With a Router, MODULE LIST goes to the node that
// serves key (a cluster's nodes are taken to run one build).
func (c *Client) checkModule(ctx context.Context, key string) error {
	c.moduleMu.Lock()
	defer c.moduleMu.Unlock()
	if c.moduleChecked {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, moduleCheckTimeout)
		defer cancel()
	}
	node, err := c.nodeOf(ctx, key, false)
	if err != nil {
		return err
	}
	reply, err := c.doOn(ctx, node, "MODULE", "LIST")
	var refused ServerError
	if errors.As(err, &refused) && refused.Code() == "NOPERM" {
		c.moduleChecked = true
		return nil
	}
	if err != nil {
		return err
	}
	found, err := lockModuleVersion(reply)
	if err != nil {
		return err
	}
	if found < MinModuleVersion {
		return &ModuleVersionError{Found: found, Needed: MinModuleVersion}
	}
	c.moduleChecked = true
	return nil
}

// lockModuleVersion reads MODULE LIST's reply (an array of modules, each
// a name/value array or a map): the ver of the module named "lock", 0 when
// there is none.
func lockModuleVersion(reply interface{}) (int64, error) {
	modules, ok := reply.([]interface{})
	if !ok && reply != nil {
		return 0, fmt.Errorf("redislock: unexpected reply to MODULE LIST: %T", reply)
	}
	for _, module := range modules {
		fields, err := replyFields(module)
		if err != nil {
			return 0, fmt.Errorf("redislock: MODULE LIST: %w", err)
		}
		if name, err := replyString(fields["name"]); err != nil || name != "lock" {
			continue
		}
		ver, err := replyInt(fields["ver"])
		if err != nil {
			return 0, fmt.Errorf("redislock: MODULE LIST ver: %w", err)
		}
		return ver, nil
	}
	return 0, nil
}
