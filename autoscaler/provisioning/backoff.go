package provisioning

import (
	"sync"
	"time"
)

// Defaults of the node-group backoff, cluster-autoscaler's
// (--initial-node-group-backoff-duration, --max-node-group-backoff-duration).
const (
	DefaultNodeGroupBackoff    = 5 * time.Minute
	DefaultMaxNodeGroupBackoff = 30 * time.Minute
)

// groupBackoff keeps a node group whose scale-up just failed out of the
// next plans for a while, as cluster-autoscaler backs off a node group:
// for initial after a failure, twice as long after each further failure
// in a row, at most max; a scale-up of the group whose nodes came up
// resets it. It is kept in memory: a restarted provisioner backs off no
// group, as a restarted cluster-autoscaler.
type groupBackoff struct {
	mu     sync.Mutex
	groups map[string]backoffEntry
}

type backoffEntry struct {
	until time.Time
	// last is the length of the latest backoff.
	last time.Duration
}

// failed backs group off from now and returns until when.
func (b *groupBackoff) failed(group string, now time.Time, initial, max time.Duration) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.groups == nil {
		b.groups = map[string]backoffEntry{}
	}
	d := initial
	if e, ok := b.groups[group]; ok {
		d = min(2*e.last, max)
	}
	e := backoffEntry{until: now.Add(d), last: d}
	b.groups[group] = e
	return e.until
}

// until reports whether group is backed off at now, and until when.
func (b *groupBackoff) until(group string, now time.Time) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.groups[group]
	if !ok || !now.Before(e.until) {
		return time.Time{}, false
	}
	return e.until, true
}

// succeeded forgets group's failures.
func (b *groupBackoff) succeeded(group string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.groups, group)
}
