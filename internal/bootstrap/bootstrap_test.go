package bootstrap

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://example.test:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func TestFlags(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	for _, name := range []string{"kubeconfig", "v", "vmodule", "logtostderr"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no flag --%s", name)
		}
	}
	if f := fs.ShorthandLookup("v"); f == nil || f.Name != "v" {
		t.Errorf("no shorthand -v: %v", f)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--kubeconfig", path}); err != nil {
		t.Fatal(err)
	}
	if o.Kubeconfig != path {
		t.Errorf("Kubeconfig %q, want %q", o.Kubeconfig, path)
	}
	cfg, err := o.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://example.test:6443" || cfg.BearerToken != "t" {
		t.Errorf("rest config of %s: host %q, token %q", path, cfg.Host, cfg.BearerToken)
	}
}

func TestRESTConfigMissingFile(t *testing.T) {
	o := Options{Kubeconfig: filepath.Join(t.TempDir(), "missing")}
	if _, err := o.RESTConfig(); err == nil {
		t.Error("no error for a missing kubeconfig")
	}
}

func TestSignalContext(t *testing.T) {
	ctx, stop := SignalContext()
	defer stop()
	if ctx.Err() != nil {
		t.Fatalf("context ended before a signal: %v", ctx.Err())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("context did not end on SIGTERM")
	}
}
