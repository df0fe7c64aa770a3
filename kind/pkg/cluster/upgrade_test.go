package cluster

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// upgradeRuntime is a runtime that records the upgrade steps it ran; the
// methods Upgrade does not call are left to the nil embedded interface.
type upgradeRuntime struct {
	Runtime
	state   State
	fail    string
	stopped []string
	ran     []string
}

func (r *upgradeRuntime) Name() string                              { return "fake" }
func (r *upgradeRuntime) State(context.Context) (State, error)      { return r.state, nil }
func (r *upgradeRuntime) Stopped(context.Context) ([]string, error) { return r.stopped, nil }
func (r *upgradeRuntime) LogTail(c string, _ int) (string, error) {
	return c + ": data dir is of a newer version", nil
}
func (r *upgradeRuntime) UpgradeSteps() []string { return []string{"crds", "etcd", "kube-apiserver"} }
func (r *upgradeRuntime) Upgrade(_ context.Context, s string) (string, error) {
	r.ran = append(r.ran, s)
	if s == r.fail {
		return "", errors.New(s + " did not come back")
	}
	return "upgraded", nil
}

// noUpgradeRuntime cannot upgrade in place.
type noUpgradeRuntime struct{ Runtime }

func (noUpgradeRuntime) Name() string { return "plain" }

func TestUpgrade(t *testing.T) {
	ctx := context.Background()
	newCluster := func(r Runtime) (*Cluster, *bytes.Buffer) {
		var out bytes.Buffer
		return &Cluster{opts: &Options{Name: "c"}, runtime: r, p: newProgress(&out)}, &out
	}
	t.Run("all steps in order", func(t *testing.T) {
		r := &upgradeRuntime{state: StateRunning}
		c, out := newCluster(r)
		if err := c.Upgrade(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if want := r.UpgradeSteps(); !slices.Equal(r.ran, want) {
			t.Errorf("ran %v, want %v", r.ran, want)
		}
		if !strings.Contains(out.String(), "upgrading kube-apiserver (") {
			t.Errorf("no progress line for kube-apiserver:\n%s", out.String())
		}
	})
	t.Run("named steps run in the runtime's order", func(t *testing.T) {
		r := &upgradeRuntime{state: StateRunning}
		c, _ := newCluster(r)
		if err := c.Upgrade(ctx, []string{"kube-apiserver", "crds"}); err != nil {
			t.Fatal(err)
		}
		if want := []string{"crds", "kube-apiserver"}; !slices.Equal(r.ran, want) {
			t.Errorf("ran %v, want %v", r.ran, want)
		}
	})
	t.Run("an unknown step is refused before any runs", func(t *testing.T) {
		r := &upgradeRuntime{state: StateRunning}
		c, _ := newCluster(r)
		err := c.Upgrade(ctx, []string{"crds", "kubelet"})
		if err == nil || !strings.Contains(err.Error(), `unknown upgrade step "kubelet"`) || !strings.Contains(err.Error(), "crds, etcd, kube-apiserver") {
			t.Fatalf("got %v", err)
		}
		if len(r.ran) > 0 {
			t.Errorf("ran %v", r.ran)
		}
	})
	t.Run("a stopped cluster is refused", func(t *testing.T) {
		r := &upgradeRuntime{state: StateStopped}
		c, _ := newCluster(r)
		if err := c.Upgrade(ctx, nil); err == nil || !strings.Contains(err.Error(), "only a running cluster is upgraded") {
			t.Fatalf("got %v", err)
		}
		if len(r.ran) > 0 {
			t.Errorf("ran %v", r.ran)
		}
	})
	t.Run("a failed step stops the upgrade and names its component", func(t *testing.T) {
		r := &upgradeRuntime{state: StateRunning, fail: "etcd", stopped: []string{"etcd"}}
		c, _ := newCluster(r)
		err := c.Upgrade(ctx, nil)
		if err == nil || !strings.Contains(err.Error(), "etcd did not come back") ||
			!strings.Contains(err.Error(), "last lines of the etcd log:\n    etcd: data dir") {
			t.Fatalf("got %v", err)
		}
		if want := []string{"crds", "etcd"}; !slices.Equal(r.ran, want) {
			t.Errorf("ran %v, want %v", r.ran, want)
		}
	})
	t.Run("a runtime that cannot upgrade says so", func(t *testing.T) {
		c, _ := newCluster(noUpgradeRuntime{})
		var ns *NotSupportedError
		if err := c.Upgrade(ctx, nil); !errors.As(err, &ns) {
			t.Fatalf("got %v", err)
		}
	})
}
