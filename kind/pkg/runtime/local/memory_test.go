package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tgantry-provisioner\nVmPeak:\t 1300000 kB\nVmRSS:\t   81234 kB\nRssAnon:\t   70000 kB\n"
	got, err := parseVmRSS(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(81234) << 10; got != want {
		t.Errorf("parseVmRSS = %d, want %d", got, want)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tmany kB\n", "VmRSS:\t-1 kB\n", "VmRSS:\n"} {
		if n, err := parseVmRSS(strings.NewReader(bad)); err == nil {
			t.Errorf("parseVmRSS(%q) = %d, want an error", bad, n)
		}
	}
}

// TestResidentMemory reads this test's own process through a pid file, as
// kwokctl writes them.
func TestResidentMemory(t *testing.T) {
	r := New(&cluster.Options{Name: "m", WorkDir: t.TempDir()})
	if err := os.MkdirAll(filepath.Dir(r.pidFile("me")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.pidFile("me"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rss, err := r.ResidentMemory("me")
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Errorf("ResidentMemory of the test process = %d bytes, want at least 1 MiB", rss)
	}
	if _, err := r.ResidentMemory("absent"); err == nil || !strings.Contains(err.Error(), "the process of absent") {
		t.Errorf("ResidentMemory of a component without a pid file: %v, want an error naming it", err)
	}
}
