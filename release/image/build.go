package image

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OCI annotation keys (image-spec annotations.md).
const (
	AnnotationTitle       = "org.opencontainers.image.title"
	AnnotationDescription = "org.opencontainers.image.description"
	AnnotationVersion     = "org.opencontainers.image.version"
	AnnotationRevision    = "org.opencontainers.image.revision"
	AnnotationSource      = "org.opencontainers.image.source"
	AnnotationCreated     = "org.opencontainers.image.created"
	AnnotationVendor      = "org.opencontainers.image.vendor"
	AnnotationRefName     = "org.opencontainers.image.ref.name"
	// AnnotationUpstream names the pinned module the binaries are built from.
	AnnotationUpstream = "dev.gantry.image.upstream"
)

// Meta is what every image says about the build it comes from.
type Meta struct {
	// Revision is the Gantry commit.
	Revision string
	// Source is where Gantry's source can be had.
	Source string
	// Created is the commit's time: every timestamp in an image is this one,
	// so a rebuild of the same commit gives the same digests.
	Created time.Time
}

// Platform is a build target, "linux/amd64" or "linux/arm64".
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// Dir is the bin directory's subdirectory for this platform.
func (p Platform) Dir() string { return p.OS + "_" + p.Arch }

// ParsePlatforms reads "linux/amd64,linux/arm64".
func ParsePlatforms(s string) ([]Platform, error) {
	var out []Platform
	seen := map[Platform]bool{}
	for _, part := range strings.Split(s, ",") {
		goos, arch, ok := strings.Cut(strings.TrimSpace(part), "/")
		p := Platform{OS: goos, Arch: arch}
		if !ok || goos != "linux" || elfMachine[arch] == 0 {
			return nil, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", part)
		}
		if seen[p] {
			return nil, fmt.Errorf("platform %q given twice", part)
		}
		seen[p] = true
		out = append(out, p)
	}
	return out, nil
}

// Built is one component's multi-platform image.
type Built struct {
	Component Component
	Index     v1.ImageIndex
	// Images by platform, in the order the platforms were given.
	Images    map[Platform]v1.Image
	Platforms []Platform
}

// Builder assembles images from binaries already built per platform under
// BinDir/<os>_<arch>/, on the shared base layer.
type Builder struct {
	BinDir string
	Meta   Meta
	base   v1.Layer
}

func (b *Builder) annotations(c Component) map[string]string {
	return map[string]string{
		AnnotationTitle:       c.Name,
		AnnotationDescription: c.Description,
		AnnotationVersion:     c.Version,
		AnnotationRevision:    b.Meta.Revision,
		AnnotationSource:      b.Meta.Source,
		AnnotationCreated:     b.Meta.Created.UTC().Format(time.RFC3339),
		AnnotationVendor:      "Gantry",
		AnnotationUpstream:    c.Upstream,
	}
}

// Build makes the component's image for each platform and the index over them.
func (b *Builder) Build(c Component, platforms []Platform) (*Built, error) {
	if len(platforms) == 0 {
		return nil, fmt.Errorf("%s: no platform", c.Name)
	}
	if b.base == nil {
		files, err := BaseFiles()
		if err != nil {
			return nil, err
		}
		if b.base, err = Layer(files, b.Meta.Created); err != nil {
			return nil, fmt.Errorf("base layer: %w", err)
		}
	}
	ann := b.annotations(c)
	out := &Built{Component: c, Images: map[Platform]v1.Image{}, Platforms: platforms}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		img, err := b.image(c, p, ann)
		if err != nil {
			return nil, fmt.Errorf("%s for %s: %w", c.Name, p, err)
		}
		out.Images[p] = img
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch}},
		})
	}
	out.Index = mutate.Annotations(idx, ann).(v1.ImageIndex)
	return out, nil
}

func (b *Builder) image(c Component, p Platform, ann map[string]string) (v1.Image, error) {
	files := append([]File(nil), c.Files...)
	if c.RootFS {
		dir := filepath.Join(b.BinDir, p.Dir(), "rootfs", c.Name)
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("%s's rootfs: %w (hack/images.sh writes it)", c.Name, err)
		}
		rootfs, err := DirFiles(dir)
		if err != nil {
			return nil, err
		}
		if err := checkLinked(rootfs, p); err != nil {
			return nil, fmt.Errorf("%s's rootfs: %w", c.Name, err)
		}
		files = append(files, rootfs...)
	}
	for _, bin := range c.Binaries {
		src := filepath.Join(b.BinDir, p.Dir(), bin.Name)
		if err := checkStatic(src, p); err != nil {
			return nil, err
		}
		files = append(files, File{Path: bin.Dest, Source: src, Mode: 0o755})
	}
	layer, err := Layer(files, b.Meta.Created)
	if err != nil {
		return nil, err
	}
	return Assemble(p, b.Meta.Created, v1.Config{
		User:       c.User,
		Entrypoint: c.Entrypoint,
		Env:        []string{pathEnv, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		WorkingDir: "/",
	}, ann, Step{Layer: b.base, CreatedBy: "gantry-images: static base"}, Step{Layer: layer, CreatedBy: "gantry-images: " + c.Name})
}

// BuildAll builds every component, sorted by name.
func (b *Builder) BuildAll(cs []Component, platforms []Platform) ([]*Built, error) {
	cs = append([]Component(nil), cs...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	var out []*Built
	for _, c := range cs {
		built, err := b.Build(c, platforms)
		if err != nil {
			return nil, err
		}
		out = append(out, built)
	}
	return out, nil
}

// Step is one layer of an image and the history line that says what it is.
type Step struct {
	Layer     v1.Layer
	CreatedBy string
}

// Assemble makes an OCI image for platform p from layers, with config as its
// runtime configuration and ann as its manifest annotations and labels; every
// time in it is created.
func Assemble(p Platform, created time.Time, config v1.Config, ann map[string]string, steps ...Step) (v1.Image, error) {
	t := v1.Time{Time: created.UTC()}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, s := range steps {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer: s.Layer, MediaType: types.OCILayer,
			History: v1.History{Created: t, CreatedBy: s.CreatedBy, Author: "Gantry"},
		})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created, cf.Author = p.OS, p.Arch, t, "Gantry"
	config.Labels = ann
	cf.Config = config
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, ann).(v1.Image), nil
}
