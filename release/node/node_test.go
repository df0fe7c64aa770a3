package node

import (
	"archive/tar"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gantry-dev/gantry/release/image"
	"github.com/gantry-dev/gantry/release/image/imagetest"
)

// kindFilesDir is images/base/files of the kind module hack/tools/node pins.
func kindFilesDir(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kind")
	cmd.Dir = "../../hack/tools/node"
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Skipf("kind module not in the module cache: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "images", "base", "files")
}

func testOptions(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for n := range nodeBinaries {
		if err := os.WriteFile(filepath.Join(bin, n), []byte("binary "+n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A ctr whose `oci spec` prints a spec with rlimits and a hook of its own.
	ctr := "#!/bin/sh\necho '{\"ociVersion\":\"1.2.0\",\"process\":{\"rlimits\":[{\"type\":\"RLIMIT_NOFILE\"}]},\"hooks\":{\"createContainer\":[{\"path\":\"/x\"}]}}'\n"
	if err := os.WriteFile(filepath.Join(bin, "ctr"), []byte(ctr), 0o755); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs.tar")
	f, err := os.Create(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	_ = tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "etc/debian_version", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	_, _ = tw.Write([]byte("12\n"))
	_ = tw.Close()
	_ = f.Close()
	archive := filepath.Join(dir, "pause.linux-amd64.tar")
	if err := os.WriteFile(archive, []byte("an archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	return Options{
		RootFS: rootfs, KindFiles: kindFilesDir(t), BinDir: bin, Platform: image.Platform{OS: "linux", Arch: "amd64"},
		Archives: []string{archive}, KubeVersion: "v1.36.3", SandboxImage: "gantry.local/pause:3.10.2",
		Meta: image.Meta{Revision: "abc", Created: time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)}, Version: "v1.36.3+gantry.abc",
	}
}

func TestBuild(t *testing.T) {
	img, err := Build(testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{InitPath, kindEntrypoint, "/sbin/init"}) || cf.Config.StopSignal != "SIGRTMIN+3" ||
		!slices.Contains(cf.Config.Env, "container=docker") {
		t.Errorf("config: entrypoint %v stop signal %q env %v", cf.Config.Entrypoint, cf.Config.StopSignal, cf.Config.Env)
	}
	layers, _ := img.Layers()
	if len(layers) != 3 {
		t.Errorf("%d layers, want rootfs, node files, images", len(layers))
	}

	fs := imagetest.Filesystem(t, img)
	content := map[string]string{}
	modes := map[string]int64{}
	links := map[string]string{}
	for name, e := range fs {
		modes[name], links[name] = e.Header.Mode, e.Header.Linkname
		if e.Header.Typeflag == tar.TypeReg {
			content[name] = e.Content
		}
	}
	for p, want := range map[string]string{
		"etc/debian_version": "12\n", "kind/version": "v1.36.3",
		"kind/images/pause.linux-amd64.tar": "an archive", "usr/bin/kubelet": "binary kubelet",
		"usr/local/bin/containerd": "binary containerd", "opt/cni/bin/ptp": "binary ptp",
	} {
		if content[p] != want {
			t.Errorf("%s = %q, want %q", p, content[p], want)
		}
	}
	if !strings.Contains(content["etc/containerd/config.toml"], `sandbox_image = "gantry.local/pause:3.10.2"`) ||
		!strings.Contains(content["etc/containerd/config.toml"], "restrict_oom_score_adj = false") {
		t.Errorf("containerd config:\n%s", content["etc/containerd/config.toml"])
	}
	var spec struct {
		Process map[string]any `json:"process"`
		Hooks   struct {
			CreateContainer []struct{ Path string } `json:"createContainer"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal([]byte(content["etc/containerd/cri-base.json"]), &spec); err != nil {
		t.Fatal(err)
	}
	if _, ok := spec.Process["rlimits"]; ok || len(spec.Hooks.CreateContainer) != 2 || spec.Hooks.CreateContainer[1].Path != "/kind/bin/mount-product-files.sh" {
		t.Errorf("cri-base.json: %+v", spec)
	}
	for _, p := range []string{InitPath, "usr/local/bin/entrypoint", "kind/bin/mount-product-files.sh", "kind/bin/gantry-import-images"} {
		p = strings.TrimPrefix(p, "/")
		if modes[p]&0o111 == 0 {
			t.Errorf("%s mode %o is not executable", p, modes[p])
		}
	}
	for _, unit := range enabled {
		if links["etc/systemd/system/multi-user.target.wants/"+unit] != "/etc/systemd/system/"+unit {
			t.Errorf("%s is not enabled", unit)
		}
		if _, ok := content["etc/systemd/system/"+unit]; !ok {
			t.Errorf("no unit %s", unit)
		}
	}
	for _, p := range []string{"etc/systemd/system/containerd-fuse-overlayfs.service", "LICENSES/README.txt"} {
		if _, ok := content[p]; ok {
			t.Errorf("%s should not be in the node", p)
		}
	}
}

func TestBuildNeedsItsParts(t *testing.T) {
	o := testOptions(t)
	if err := os.Remove(filepath.Join(o.BinDir, "kubeadm")); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(o); err == nil || !strings.Contains(err.Error(), "node binary kubeadm") {
		t.Errorf("without kubeadm: err = %v", err)
	}
	o = testOptions(t)
	o.SandboxImage = ""
	if _, err := Build(o); err == nil {
		t.Error("built without a sandbox image")
	}
	o = testOptions(t)
	o.RootFS = filepath.Join(t.TempDir(), "missing.tar")
	if _, err := Build(o); err == nil || !strings.Contains(err.Error(), "root filesystem") {
		t.Errorf("without a rootfs: err = %v", err)
	}
}

// kindBase is a stand-in for kindest/node: kind's entrypoint, a kubelet of
// its own and a version file Gantry replaces.
func kindBase(t *testing.T, arch string) v1.Image {
	t.Helper()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	layer, err := image.Layer([]image.File{
		{Path: "/usr/local/bin/entrypoint", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Path: "/usr/bin/kubelet", Data: []byte("upstream kubelet"), Mode: 0o755},
		{Path: "/kind/version", Data: []byte("v1.36.1")},
	}, created)
	if err != nil {
		t.Fatal(err)
	}
	img, err := image.Assemble(image.Platform{OS: "linux", Arch: arch}, created, v1.Config{
		Entrypoint: []string{kindEntrypoint, "/sbin/init"}, StopSignal: "SIGRTMIN+3", Env: []string{"container=docker"},
	}, nil, image.Step{Layer: layer, CreatedBy: "kind base"})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestBuildOnBase(t *testing.T) {
	o := testOptions(t)
	o.Base = kindBase(t, "amd64")
	img, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{InitPath, kindEntrypoint, "/sbin/init"}) || cf.Config.StopSignal != "SIGRTMIN+3" {
		t.Errorf("config: entrypoint %v stop signal %q", cf.Config.Entrypoint, cf.Config.StopSignal)
	}
	if cf.Config.Labels[image.AnnotationVersion] != o.Version {
		t.Errorf("labels %v", cf.Config.Labels)
	}
	if layers, _ := img.Layers(); len(layers) != 3 {
		t.Errorf("%d layers, want the base's, Gantry's files, images", len(layers))
	}
	fs := imagetest.Filesystem(t, img)
	for p, want := range map[string]string{
		"kind/version": "v1.36.3", "usr/bin/kubelet": "upstream kubelet",
		"kind/images/pause.linux-amd64.tar": "an archive",
	} {
		if fs[p].Content != want {
			t.Errorf("%s = %q, want %q", p, fs[p].Content, want)
		}
	}
	for _, p := range []string{"kind/bin/gantry-node-init", "kind/bin/gantry-import-images", "etc/systemd/system/gantry-images.service"} {
		if _, ok := fs[p]; !ok {
			t.Errorf("%s missing", p)
		}
	}
	if got := fs["etc/systemd/system/kubelet.service.requires/gantry-images.service"].Header.Linkname; got != "/etc/systemd/system/gantry-images.service" {
		t.Errorf("kubelet does not require the image import: link %q", got)
	}
	if _, ok := fs["etc/containerd/config.toml"]; ok {
		t.Error("the base's containerd configuration was replaced")
	}
}

func TestBuildOnBaseRefusesOtherImages(t *testing.T) {
	o := testOptions(t)
	o.Base = kindBase(t, "arm64")
	if _, err := Build(o); err == nil || !strings.Contains(err.Error(), "linux/arm64") {
		t.Errorf("a base of another platform: %v", err)
	}
	notKind, err := image.Assemble(image.Platform{OS: "linux", Arch: "amd64"}, time.Time{}, v1.Config{Entrypoint: []string{"/bin/sh"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Base = notKind
	if _, err := Build(o); err == nil || !strings.Contains(err.Error(), "not a kind node image") {
		t.Errorf("a base that is not a kind node: %v", err)
	}
}
