package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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

// During the delay every response closes its connection, so that no
// keep-alive connection is left for the server to close under a request.
func TestConnectionsCloseWhileStopping(t *testing.T) {
	stopping := make(chan struct{})
	srv := httptest.NewServer(closeWhenStopping(stopping, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	defer srv.Close()
	get := func() *http.Response {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	if resp := get(); resp.Close {
		t.Errorf("before stopping: the response closes its connection")
	}
	close(stopping)
	// Go's client reads "Connection: close" into Close.
	if resp := get(); !resp.Close {
		t.Errorf("while stopping: the response keeps its connection open")
	}
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
