package image

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gantry-dev/gantry/release/image/imagetest"
)

var epoch = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

var amd64, arm64 = Platform{OS: "linux", Arch: "amd64"}, Platform{OS: "linux", Arch: "arm64"}

var testVersions = Versions{Kube: "v1.36.3", Gantry: "v1.36.3+gantry.0123456789ab", Etcd: "3.6.8", CoreDNS: "v1.14.2", Kwok: "v0.8.0", Pause: "3.10"}

func component(t *testing.T, n string) Component {
	t.Helper()
	cs := Components(testVersions)
	i := slices.IndexFunc(cs, func(c Component) bool { return c.Name == n })
	if i < 0 {
		t.Fatalf("no component %s", n)
	}
	return cs[i]
}

func TestLayerIsDeterministic(t *testing.T) {
	files := []File{
		{Path: "/usr/local/bin/x", Data: []byte("x"), Mode: 0o755},
		{Path: "/etc/a", Data: []byte("a")},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/bin", Link: "usr/bin"},
	}
	reversed := slices.Clone(files)
	slices.Reverse(reversed)
	digests := map[string]bool{}
	for _, fs := range [][]File{files, reversed, files} {
		l, err := Layer(fs, epoch)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[d.String()] = true
	}
	if len(digests) != 1 {
		t.Errorf("the same files gave %d different digests: %v", len(digests), digests)
	}
	l, _ := Layer(files, epoch.Add(time.Second))
	if d, _ := l.Digest(); digests[d.String()] {
		t.Errorf("a different epoch gave the same digest; times are not in the layer")
	}
}

func TestLayerEntries(t *testing.T) {
	data, err := layerTar([]File{
		{Path: "/usr/local/bin/x", Data: []byte("hello"), Mode: 0o755},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
	}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range imagetest.Entries(t, strings.NewReader(string(data))) {
		h := e.Header
		if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v uname %q gname %q; want the epoch and numeric owners only", h.Name, h.ModTime, h.Uname, h.Gname)
		}
		got = append(got, h.Name+" "+h.FileInfo().Mode().String()+" "+strconv.Itoa(h.Uid))
	}
	want := []string{
		"home/ drwxr-xr-x 0", "home/nonroot/ drwx------ 65532",
		"usr/ drwxr-xr-x 0", "usr/local/ drwxr-xr-x 0", "usr/local/bin/ drwxr-xr-x 0", "usr/local/bin/x -rwxr-xr-x 0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries:\n got %q\nwant %q", got, want)
	}
}

func TestLayerRefusesBadEntries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []File
		want  string
	}{
		{"relative", []File{{Path: "etc/passwd"}}, "must be absolute"},
		{"escape", []File{{Path: "/etc/../../x"}}, "must be clean"},
		{"root", []File{{Path: "/", Dir: true}}, "not the root"},
		{"duplicate", []File{{Path: "/a"}, {Path: "/a"}}, "given twice"},
		{"two kinds", []File{{Path: "/a", Data: []byte("x"), Link: "b"}}, "more than one"},
		{"under a file", []File{{Path: "/a", Data: []byte("x")}, {Path: "/a/b"}}, "not a directory"},
		{"missing source", []File{{Path: "/a", Source: "/nonexistent/gantry"}}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := layerTar(tc.files, epoch)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestBaseFiles(t *testing.T) {
	files, err := BaseFiles()
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	if !strings.Contains(string(byPath["/etc/passwd"].Data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", byPath["/etc/passwd"].Data)
	}
	if !strings.Contains(string(byPath["/etc/group"].Data), "nonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot group 65532")
	}
	if f := byPath["/tmp"]; !f.Dir || f.Mode != 0o1777 {
		t.Errorf("/tmp = %+v, want a sticky world-writable directory", f)
	}
	rest, n := byPath["/etc/ssl/certs/ca-certificates.crt"].Data, 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Fatalf("certificate %d: %v", n, err)
		}
		n++
	}
	if n < 100 || len(strings.TrimSpace(string(rest))) != 0 {
		t.Errorf("CA bundle: %d certificates and %d bytes left over; want the NSS roots (over 100) and nothing else", n, len(rest))
	}
}

func TestBuildIsReproducibleAndComplete(t *testing.T) {
	c := component(t, "gantry-webhook")
	dir := imagetest.BinDir(t, "gantry-webhook")
	meta := Meta{Revision: "0123456789ab", Source: "https://example.test/gantry", Created: epoch}
	first, err := (&Builder{BinDir: dir, Meta: meta}).Build(c, []Platform{amd64, arm64})
	if err != nil {
		t.Fatal(err)
	}
	second, err := (&Builder{BinDir: dir, Meta: meta}).Build(c, []Platform{amd64, arm64})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Index.Digest()
	d2, _ := second.Index.Digest()
	if d1 != d2 {
		t.Errorf("two builds from the same inputs: index digests %s and %s", d1, d2)
	}

	im, err := first.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != 2 {
		t.Fatalf("index: media type %s with %d manifests, want an OCI index of 2", im.MediaType, len(im.Manifests))
	}
	for i, p := range []Platform{amd64, arm64} {
		if got := im.Manifests[i].Platform; got == nil || got.OS != p.OS || got.Architecture != p.Arch {
			t.Errorf("manifest %d platform = %v, want %s", i, got, p)
		}
	}
	for _, key := range []string{AnnotationVersion, AnnotationRevision, AnnotationSource, AnnotationCreated, AnnotationTitle} {
		if im.Annotations[key] == "" {
			t.Errorf("index has no %s annotation", key)
		}
	}
	if im.Annotations[AnnotationVersion] != testVersions.Gantry || im.Annotations[AnnotationRevision] != meta.Revision {
		t.Errorf("index annotations %v", im.Annotations)
	}

	img := first.Images[arm64]
	m, _ := img.Manifest()
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON || m.Annotations[AnnotationRevision] != meta.Revision {
		t.Errorf("manifest: %s, config %s, annotations %v", m.MediaType, m.Config.MediaType, m.Annotations)
	}
	cf, _ := img.ConfigFile()
	if cf.Architecture != "arm64" || cf.OS != "linux" || cf.Config.User != "65532:65532" ||
		!slices.Equal(cf.Config.Entrypoint, []string{"/gantry-webhook"}) || !cf.Created.Time.Equal(epoch) {
		t.Errorf("config: arch %s os %s user %s entrypoint %v created %v", cf.Architecture, cf.OS, cf.Config.User, cf.Config.Entrypoint, cf.Created)
	}

	seen := imagetest.Filesystem(t, img)
	for _, want := range []string{"etc/passwd", "etc/ssl/certs/ca-certificates.crt", "tmp", "gantry-webhook"} {
		if _, ok := seen[want]; !ok {
			t.Errorf("the image has no %s", want)
		}
	}
	if e, ok := seen["gantry-webhook"]; ok && e.Header.Mode&0o111 == 0 {
		t.Errorf("gantry-webhook mode %o is not executable", e.Header.Mode)
	}
}

// TestKwokImageCarriesStages: the kwok image holds the stages file
// hack/images.sh writes, readable by its non-root user, and starts kwok with
// it; without the file it is not built.
func TestKwokImageCarriesStages(t *testing.T) {
	c := component(t, "kwok")
	dir := imagetest.BinDir(t, "kwok")
	b := &Builder{BinDir: dir, Meta: Meta{Created: epoch}}
	if _, err := b.Build(c, []Platform{amd64}); err == nil || !strings.Contains(err.Error(), "kwok's rootfs") {
		t.Errorf("without the stages: err = %v", err)
	}
	const stages = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: node-initialize}\n"
	imagetest.RootFSFile(t, dir, "kwok", "etc/kwok/stages.yaml", stages)
	built, err := b.Build(c, []Platform{amd64, arm64})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Platform{amd64, arm64} {
		img := built.Images[p]
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"/usr/local/bin/kwok", "--config=/etc/kwok/stages.yaml"}
		if !slices.Equal(cf.Config.Entrypoint, want) || cf.Config.User != "65532:65532" {
			t.Errorf("%s: entrypoint %q user %s, want %q as 65532:65532", p, cf.Config.Entrypoint, cf.Config.User, want)
		}
		fs := imagetest.Filesystem(t, img)
		e, ok := fs["etc/kwok/stages.yaml"]
		switch {
		case !ok:
			t.Errorf("%s: no etc/kwok/stages.yaml", p)
		case e.Content != stages || e.Header.Mode&0o777 != 0o644 || e.Header.Uid != 0:
			t.Errorf("%s: etc/kwok/stages.yaml mode %o uid %d content %q", p, e.Header.Mode, e.Header.Uid, e.Content)
		}
		for _, want := range []string{"etc/passwd", "usr/local/bin/kwok"} {
			if _, ok := fs[want]; !ok {
				t.Errorf("%s: no %s", p, want)
			}
		}
	}
}

func TestBuildRefusesWrongBinaries(t *testing.T) {
	c := component(t, "pause")
	dir := t.TempDir()
	b := &Builder{BinDir: dir, Meta: Meta{Created: epoch}}
	if _, err := b.Build(c, []Platform{amd64}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("no binary: err = %v", err)
	}
	imagetest.WriteELF(t, filepath.Join(dir, "linux_amd64", "pause"), "arm64", false)
	if _, err := b.Build(c, []Platform{amd64}); err == nil || !strings.Contains(err.Error(), "not linux/amd64") {
		t.Errorf("arm64 binary for amd64: err = %v", err)
	}
	imagetest.WriteELF(t, filepath.Join(dir, "linux_amd64", "pause"), "amd64", true)
	if _, err := b.Build(c, []Platform{amd64}); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("dynamic binary: err = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "linux_amd64", "pause"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Build(c, []Platform{amd64}); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("script: err = %v", err)
	}
}

func TestParsePlatforms(t *testing.T) {
	got, err := ParsePlatforms("linux/amd64, linux/arm64")
	if err != nil || !slices.Equal(got, []Platform{amd64, arm64}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "linux", "windows/amd64", "linux/s390x", "linux/amd64,linux/amd64"} {
		if _, err := ParsePlatforms(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestLayoutTarballAndPush writes the layout and the archives, reads them back
// as docker and a registry client would, and pushes to an in-process registry.
func TestLayoutTarballAndPush(t *testing.T) {
	cs := []Component{component(t, "gantry-provisioner"), component(t, "kube-scheduler")}
	dir := imagetest.BinDir(t, "gantry-provisioner", "kube-scheduler")
	built, err := (&Builder{BinDir: dir, Meta: Meta{Revision: "abc", Created: epoch}}).BuildAll(cs, []Platform{amd64, arm64})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	layoutDir := filepath.Join(out, "oci")
	if err := WriteLayout(layoutDir, "gantry.local", built); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := p.ImageIndex()
	rm, _ := root.IndexManifest()
	var names []string
	for _, d := range rm.Manifests {
		names = append(names, d.Annotations[annotationContainerdName])
	}
	wantNames := []string{
		"gantry.local/gantry-provisioner:v1.36.3", "gantry.local/gantry-provisioner:v1.36.3_gantry.0123456789ab",
		"gantry.local/kube-scheduler:v1.36.3", "gantry.local/kube-scheduler:v1.36.3_gantry.0123456789ab",
	}
	if !slices.Equal(names, wantNames) {
		t.Errorf("layout names %q, want %q", names, wantNames)
	}

	if err := WriteTarballs(out, "gantry.local", built, arm64); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("gantry.local/kube-scheduler:v1.36.3")
	img, err := tarball.ImageFromPath(TarballPath(out, cs[1], arm64), &tag)
	if err != nil {
		t.Fatal(err)
	}
	gotID, _ := img.ConfigName()
	wantID, _ := built[1].Images[arm64].ConfigName()
	if gotID != wantID {
		t.Errorf("archive holds config %s, built %s", gotID, wantID)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://") + "/mirror"
	pushed, err := Push(layoutDir, reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != 4 {
		t.Errorf("pushed %q, want 4 references", pushed)
	}
	for _, b := range built {
		ref, _ := name.NewTag(reg + "/" + b.Component.Name + ":" + TagFor(testVersions.Gantry))
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		got, _ := idx.Digest()
		want, _ := b.Index.Digest()
		if got != want {
			t.Errorf("%s: registry has %s, built %s", ref, got, want)
		}
		// The registry serves each platform's image, whole.
		armImg, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := armImg.Digest(); func() bool { w, _ := b.Images[arm64].Digest(); return d != w }() {
			t.Errorf("%s arm64: registry serves %s", ref, d)
		}
	}
	if _, err := Push(filepath.Join(out, "nothing"), reg); err == nil || !strings.Contains(err.Error(), "make images") {
		t.Errorf("push of a missing layout: err = %v", err)
	}

	// The layout's digests, which `make manifests` pins, are those pushed.
	digests, err := LayoutDigests(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(digests) != len(pushed) {
		t.Errorf("layout digests %v, want one per pushed reference %q", digests, pushed)
	}
	for _, p := range pushed {
		ref, digest, _ := strings.Cut(strings.TrimPrefix(p, reg+"/"), "@")
		if got := digests["gantry.local/"+ref]; got != digest {
			t.Errorf("layout digest of gantry.local/%s: %q, pushed %s", ref, got, digest)
		}
	}
}
