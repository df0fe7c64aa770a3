package image

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// annotationContainerdName is the full reference containerd's and kind's
// importers give an image they find in an OCI layout.
const annotationContainerdName = "io.containerd.image.name"

// Ref is the reference of one of the component's tags under a registry
// (e.g. "gantry.local/kube-apiserver:v1.37.2").
func Ref(registry string, c Component, tag string) (name.Tag, error) {
	return name.NewTag(strings.TrimSuffix(registry, "/")+"/"+c.Name+":"+tag, name.WeakValidation)
}

// WriteLayout writes every image but the test ones (Component.Test) as one
// OCI image layout at dir (replacing what is there), one index entry per
// tag, named by its full reference.
func WriteLayout(dir, registry string, built []*Built) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, b := range built {
		if b.Component.Test {
			continue
		}
		for _, tag := range b.Component.Tags {
			ref, err := Ref(registry, b.Component, tag)
			if err != nil {
				return err
			}
			if err := p.AppendIndex(b.Index, layout.WithAnnotations(map[string]string{
				AnnotationRefName:        tag,
				annotationContainerdName: ref.String(),
			})); err != nil {
				return fmt.Errorf("%s: %w", ref, err)
			}
		}
	}
	return nil
}

// TarballPath is where WriteTarballs puts a component's docker-load archive.
func TarballPath(dir string, c Component, p Platform) string {
	return filepath.Join(dir, fmt.Sprintf("%s.%s-%s.tar", c.Name, p.OS, p.Arch))
}

// WriteTarballs writes, for each component, a `docker load`-able archive of
// its image for platform p carrying all its tags.
func WriteTarballs(dir, registry string, built []*Built, p Platform) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, b := range built {
		img, ok := b.Images[p]
		if !ok {
			return fmt.Errorf("%s was not built for %s", b.Component.Name, p)
		}
		refs := map[name.Reference]v1.Image{}
		for _, tag := range b.Component.Tags {
			ref, err := Ref(registry, b.Component, tag)
			if err != nil {
				return err
			}
			refs[ref] = img
		}
		path := TarballPath(dir, b.Component, p)
		if err := tarball.MultiRefWriteToFile(path+".tmp", refs); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return err
		}
	}
	return nil
}

// Summary prints one line per image: reference, index digest, and the
// compressed size of each platform's image.
func Summary(w io.Writer, registry string, built []*Built) error {
	for _, b := range built {
		digest, err := b.Index.Digest()
		if err != nil {
			return err
		}
		ref, err := Ref(registry, b.Component, b.Component.Tags[0])
		if err != nil {
			return err
		}
		var sizes []string
		for _, p := range b.Platforms {
			n, err := imageSize(b.Images[p])
			if err != nil {
				return err
			}
			sizes = append(sizes, fmt.Sprintf("%s %.1f MiB", p.Arch, float64(n)/(1<<20)))
		}
		if _, err := fmt.Fprintf(w, "%-48s %s  %s\n", ref, digest, strings.Join(sizes, ", ")); err != nil {
			return err
		}
	}
	return nil
}

// imageSize is what a pull transfers: manifest, config and compressed layers.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// Push copies every image of the OCI layout at dir to registry, under the
// repository and tag of its reference (the registry part is replaced), and
// returns the references it pushed, sorted.
func Push(dir, registry string, opts ...remote.Option) ([]string, error) {
	root, m, err := readLayout(dir)
	if err != nil {
		return nil, err
	}
	opts = append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	var pushed []string
	for _, desc := range m.Manifests {
		from := desc.Annotations[annotationContainerdName]
		src, err := name.NewTag(from, name.WeakValidation)
		if err != nil {
			return nil, fmt.Errorf("layout entry %s: %w", desc.Digest, err)
		}
		dst, err := name.NewTag(strings.TrimSuffix(registry, "/")+"/"+src.RepositoryStr()+":"+src.TagStr(), name.WeakValidation)
		if err != nil {
			return nil, err
		}
		idx, err := root.ImageIndex(desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		if err := remote.WriteIndex(dst, idx, opts...); err != nil {
			return nil, fmt.Errorf("push %s: %w", dst, err)
		}
		pushed = append(pushed, dst.String()+"@"+desc.Digest.String())
	}
	sort.Strings(pushed)
	return pushed, nil
}

// readLayout opens the OCI layout WriteLayout wrote at dir.
func readLayout(dir string) (v1.ImageIndex, *v1.IndexManifest, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s (run `make images` first): %w", dir, err)
	}
	root, err := p.ImageIndex()
	if err != nil {
		return nil, nil, err
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	return root, m, nil
}

// LayoutDigests returns the digest of every reference of the OCI layout
// WriteLayout wrote at dir (e.g. "gantry.local/kube-scheduler:v1.37.2" to
// its multi-arch index's "sha256:...").
func LayoutDigests(dir string) (map[string]string, error) {
	_, m, err := readLayout(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(m.Manifests))
	for _, desc := range m.Manifests {
		ref := desc.Annotations[annotationContainerdName]
		if ref == "" {
			return nil, fmt.Errorf("%s: layout entry %s has no %s annotation", dir, desc.Digest, annotationContainerdName)
		}
		out[ref] = desc.Digest.String()
	}
	return out, nil
}
