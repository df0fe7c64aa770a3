package webhook

import (
	"context"
	"strings"
	"testing"
	"time"
)

// After the process is told to stop, the servers go on for the delay: the
// context they run on ends only then, and readiness fails at once.
func TestShutdownDelay(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	started := make(chan struct{})
	serving := afterDelay(parent, time.Hour, func() { close(started) })
	stop()
	<-started
	if err := serving.Err(); err != nil {
		t.Fatalf("the servers stopped with the process: %v", err)
	}

	r := &readiness{stopping: parent.Done()}
	if err := r.check(); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("readiness while stopping: %v, want shutting down", err)
	}

	parent, stop = context.WithCancel(context.Background())
	serving = afterDelay(parent, 0, func() {})
	stop()
	<-serving.Done() // without a delay, at once
}

func TestClientRateMustBePositive(t *testing.T) {
	for _, set := range []func(*Options){func(o *Options) { o.QPS = 0 }, func(o *Options) { o.Burst = -1 }} {
		o := NewOptions()
		set(o)
		if err := o.Validate(); err == nil {
			t.Errorf("QPS %v, burst %d accepted", o.QPS, o.Burst)
		}
	}
}

func TestShutdownDelayIsBounded(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 6 * time.Minute} {
		o := NewOptions()
		o.ShutdownDelay = d
		if err := o.Validate(); err == nil {
			t.Errorf("--shutdown-delay=%s accepted", d)
		}
	}
	if err := NewOptions().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
