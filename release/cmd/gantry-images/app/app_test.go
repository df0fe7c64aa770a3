package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/release/image/imagetest"
)

var allBinaries = []string{
	"kube-apiserver", "kube-scheduler", "kube-apiserver-upstream", "kube-scheduler-upstream", "kube-controller-manager", "kube-proxy",
	"gantry-provisioner", "gantry-webhook", "etcd", "coredns", "pause", "kwok", "kueue",
}

func buildArgs(binDir, out string) []string {
	return []string{
		"build", "--bin-dir", binDir, "--out", out,
		"--revision", "0123456789abcdef", "--created", "2026-11-20T10:00:00Z",
		"--kube-version", "v1.36.3", "--gantry-version", "v1.36.3+gantry.0123456789ab",
		"--etcd-version", "3.6.8", "--coredns-version", "v1.14.2", "--kwok-version", "v0.8.0", "--pause-version", "3.10.2",
		"--kueue-version", "v0.17.0",
	}
}

func run(args ...string) (string, error) {
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestBuildWritesEveryImage(t *testing.T) {
	bins := imagetest.BinDir(t, allBinaries...)
	imagetest.RootFS(t, bins, "kube-proxy")
	imagetest.RootFSFile(t, bins, "kwok", "etc/kwok/stages.yaml", "kind: Stage\n")
	out := filepath.Join(t.TempDir(), "images")
	stdout, err := run(buildArgs(bins, out)...)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, stdout)
	}
	digests, err := os.ReadFile(filepath.Join(out, "digests.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"gantry.local/kube-apiserver:v1.36.3 ", "gantry.local/etcd:3.6.8-0 ", "gantry.local/coredns:v1.14.2 ",
		"gantry.local/pause:3.10.2 ", "gantry.local/kwok:v0.8.0 ", "gantry.local/gantry-webhook:v1.36.3 ",
		"gantry.local/kueue:v0.17.0 ",
	} {
		if !strings.Contains(string(digests), want) {
			t.Errorf("digests.txt has no %q:\n%s", want, digests)
		}
	}
	if n := strings.Count(string(digests), "\n"); n != len(allBinaries) {
		t.Errorf("digests.txt has %d lines, want %d", n, len(allBinaries))
	}
	// Kueue's is a test image: archived for the kind node image, not in
	// the layout a release is pushed from.
	index, err := os.ReadFile(filepath.Join(out, "oci", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(index), "/kueue:") || !strings.Contains(string(index), "/kwok:") {
		t.Errorf("the OCI layout's index should name kwok and not kueue:\n%s", index)
	}
	for _, f := range []string{"oci/index.json", "oci/oci-layout", "kube-apiserver.linux-amd64.tar", "pause.linux-amd64.tar", "kueue.linux-amd64.tar"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("no %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "pause.linux-arm64.tar")); err == nil {
		t.Errorf("an arm64 archive was written without --tarball-platforms asking for it")
	}

	// The same inputs into another directory: the same digests.
	again := filepath.Join(t.TempDir(), "images")
	if _, err := run(buildArgs(bins, again)...); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(filepath.Join(again, "digests.txt"))
	if !bytes.Equal(digests, second) {
		t.Errorf("a second build differs:\n%s\n---\n%s", digests, second)
	}
}

func TestBuildRefusesBadFlags(t *testing.T) {
	bins := imagetest.BinDir(t, allBinaries...)
	out := t.TempDir()
	for _, tc := range []struct {
		name  string
		extra []string
		drop  string
		want  string
	}{
		{"missing version", nil, "--kube-version", "--kube-version is required"},
		{"bad time", []string{"--created", "yesterday"}, "", "--created"},
		{"bad platform", []string{"--platforms", "linux/riscv64"}, "", "want linux/amd64 or linux/arm64"},
		{"archive platform not built", []string{"--platforms", "linux/amd64", "--tarball-platforms", "linux/arm64"}, "", "not in --platforms"},
		{"unknown image", []string{"--only", "kindnetd"}, "", `no image "kindnetd"`},
		{"bad registry", []string{"--registry", "UPPER CASE"}, "", "--registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			base := buildArgs(bins, out)
			for i := 0; i < len(base); i++ {
				if base[i] == tc.drop {
					i++
					continue
				}
				args = append(args, base[i])
			}
			_, err := run(append(args, tc.extra...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestPushNeedsARegistry(t *testing.T) {
	if _, err := run("push"); err == nil || !strings.Contains(err.Error(), "--registry is required") {
		t.Errorf("err = %v", err)
	}
}

func TestNodeRefusesMissingParts(t *testing.T) {
	if _, err := run("node", "--kind-files", "k", "--bin-dir", "b", "--kube-version", "v1.36.3", "--gantry-version", "g",
		"--sandbox-image", "gantry.local/pause:3.10.2", "--revision", "abc", "--created", "2026-11-20T10:00:00Z"); err == nil ||
		!strings.Contains(err.Error(), "--rootfs is required") {
		t.Errorf("without --rootfs: err = %v", err)
	}
	if _, err := run("node", "--rootfs", "r", "--kind-files", "k", "--bin-dir", "b", "--kube-version", "v1.36.3", "--gantry-version", "g",
		"--sandbox-image", "gantry.local/pause:3.10.2", "--created", "2026-11-20T10:00:00Z"); err == nil ||
		!strings.Contains(err.Error(), "--revision is required") {
		t.Errorf("without --revision: err = %v", err)
	}
}
