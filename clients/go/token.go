package redislock

import (
	"crypto/rand"
	"fmt"
)

// newToken draws a UUIDv4. The token is always the client's, sent with
// TOKEN, so that when a reply is lost (a timeout, a dropped connection, a
// cancelled wait) the package can still release what the token may hold.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redislock: drawing a token: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}
