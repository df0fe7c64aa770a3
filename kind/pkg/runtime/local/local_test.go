package local

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// The provisioner kwokctl starts gets the cluster's extra flags after its
// own, so that they win.
func TestComponentsConfigProvisionerArgs(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "kwok-stages.yaml"), []byte("kind: Stage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := New(&cluster.Options{Name: "p", BinDir: bin, WorkDir: t.TempDir(),
		ProvisionerArgs: []string{"simulation-budget=500", "--max-bookings-per-namespace=4"}})
	path, err := r.writeComponentsConfig()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n---\n")
	var config struct {
		Components []struct {
			Name   string    `json:"name"`
			Args   []string  `json:"args"`
			Metric *endpoint `json:"metric"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal([]byte(first), &config); err != nil {
		t.Fatalf("%v:\n%s", err, first)
	}
	if len(config.Components) != 1 || config.Components[0].Name != "gantry-provisioner" {
		t.Fatalf("components %+v", config.Components)
	}
	args := config.Components[0].Args
	if n := len(args); n < 3 || !slices.Equal(args[n-2:], []string{"--simulation-budget=500", "--max-bookings-per-namespace=4"}) ||
		!slices.Contains(args, "--node-group-provider=kwok") {
		t.Errorf("provisioner args %q", args)
	}
	// Its metrics are served where kwokctl's configuration says (Metrics,
	// ComponentRequestAs read them there).
	m := config.Components[0].Metric
	if m == nil || m.Scheme != "https" || m.Path != "/metrics" || !strings.HasPrefix(m.Host, "127.0.0.1:") ||
		!slices.Contains(args, "--metrics-bind-address="+m.Host) {
		t.Errorf("provisioner metric endpoint %+v, args %q", m, args)
	}

	r.o.ProvisionerArgs = []string{"budget"}
	if _, err := r.writeComponentsConfig(); err == nil {
		t.Error("a malformed provisioner flag was written")
	}
}
