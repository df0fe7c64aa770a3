// Package node assembles Gantry's kind node image: a Debian root filesystem
// (hack/node-rootfs.sh), kind's base files from the pinned kind module,
// containerd, runc and the CNI plugins, kubelet, kubeadm and kubectl, and
// every image a Gantry cluster runs, imported into containerd before kubelet
// starts. Like the component images it is put together with
// go-containerregistry; no Docker daemon is needed to build it.
package node

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gantry-dev/gantry/release/image"
)

var (
	//go:embed files/gantry-node-init
	nodeInit []byte
	//go:embed files/gantry-import-images
	importImages []byte
	//go:embed files/gantry-images.service
	importUnit []byte
	//go:embed files/config.toml
	containerdConfig string
)

// Paths of the node image that other parts of Gantry rely on.
const (
	// ImagesDir holds the image archives imported at boot.
	ImagesDir = "/kind/images"
	// InitPath is the node's first process, before kind's entrypoint.
	InitPath = "/kind/bin/gantry-node-init"
	// kindEntrypoint is kind's entrypoint from its base files.
	kindEntrypoint = "/usr/local/bin/entrypoint"
)

// Binaries of the node, by the file name under the bin directory, to their
// place in the image: kubelet and kubeadm where kind's units and kubeadm look.
var nodeBinaries = map[string]string{
	"kubelet": "/usr/bin/kubelet", "kubeadm": "/usr/bin/kubeadm", "kubectl": "/usr/bin/kubectl",
	"containerd": "/usr/local/bin/containerd", "ctr": "/usr/local/bin/ctr",
	"containerd-shim-runc-v2": "/usr/local/bin/containerd-shim-runc-v2", "crictl": "/usr/local/bin/crictl",
	"host-local": "/opt/cni/bin/host-local", "loopback": "/opt/cni/bin/loopback",
	"ptp": "/opt/cni/bin/ptp", "bridge": "/opt/cni/bin/bridge", "portmap": "/opt/cni/bin/portmap",
}

// kindSkipped are kind base files this image replaces or does not use:
// Gantry's containerd configuration, and the fuse-overlayfs snapshotter's unit
// (the snapshotter is overlayfs on a volume; see gantry-node-init).
var kindSkipped = map[string]bool{
	"/etc/containerd/config.toml":                           true,
	"/etc/systemd/system/containerd-fuse-overlayfs.service": true,
}

// enabled are the units started at boot (what `systemctl enable` would link).
var enabled = []string{"kubelet.service", "containerd.service", "undo-mount-hacks.service", "gantry-images.service"}

// Options say what goes into the node image.
type Options struct {
	// RootFS is the root filesystem tarball hack/node-rootfs.sh made.
	RootFS string
	// KindFiles is images/base/files of the pinned kind module.
	KindFiles string
	// BinDir holds the node's binaries (nodeBinaries) for Platform.
	BinDir   string
	Platform image.Platform
	// Archives are docker-load archives of the images to preload.
	Archives []string
	// KubeVersion is what kind reads from /kind/version, e.g. v1.37.2.
	KubeVersion string
	// SandboxImage is the pause image containerd runs pods with.
	SandboxImage string
	Meta         image.Meta
	// Version is the node image's org.opencontainers.image.version.
	Version string
	// Base, when set, is a kind node image (kindest/node, on machines that
	// can pull it) to build on instead of RootFS, KindFiles and BinDir: it
	// brings its own root filesystem, containerd, kubelet and kubeadm, and
	// gets Gantry's node init, the image import at boot, the preloaded
	// images and /kind/version (see BuildOnBase).
	Base v1.Image
}

// Build assembles the node image.
func Build(o Options) (v1.Image, error) {
	if o.Base != nil {
		return BuildOnBase(o)
	}
	if o.RootFS == "" || o.KindFiles == "" || o.BinDir == "" || o.KubeVersion == "" || o.SandboxImage == "" {
		return nil, fmt.Errorf("node image: rootfs, kind files, bin dir, Kubernetes version and sandbox image are all required")
	}
	if _, err := name.ParseReference(o.SandboxImage, name.WeakValidation); err != nil {
		return nil, fmt.Errorf("sandbox image: %w", err)
	}
	rootfs, err := tarball.LayerFromFile(o.RootFS, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("root filesystem: %w", err)
	}
	files, err := kindFiles(o.KindFiles)
	if err != nil {
		return nil, err
	}
	gantry, err := gantryFiles(o)
	if err != nil {
		return nil, err
	}
	files = append(files, gantry...)
	layer, err := image.Layer(files, o.Meta.Created)
	if err != nil {
		return nil, fmt.Errorf("node files: %w", err)
	}
	imagesLayer, err := preloaded(o)
	if err != nil {
		return nil, err
	}
	return image.Assemble(o.Platform, o.Meta.Created, v1.Config{
		Env:        []string{"container=docker", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Entrypoint: []string{InitPath, kindEntrypoint, "/sbin/init"},
		StopSignal: "SIGRTMIN+3",
	}, annotations(o),
		image.Step{Layer: rootfs, CreatedBy: "hack/node-rootfs.sh: Debian bookworm"},
		image.Step{Layer: layer, CreatedBy: "gantry-images node: kind base files, containerd, Kubernetes node binaries"},
		image.Step{Layer: imagesLayer, CreatedBy: "gantry-images node: preloaded images"},
	)
}

// preloaded is the layer of the image archives imported at boot.
func preloaded(o Options) (v1.Layer, error) {
	var images []image.File
	for _, a := range o.Archives {
		images = append(images, image.File{Path: ImagesDir + "/" + filepath.Base(a), Source: a})
	}
	layer, err := image.Layer(images, o.Meta.Created)
	if err != nil {
		return nil, fmt.Errorf("preloaded images: %w", err)
	}
	return layer, nil
}

func annotations(o Options) map[string]string {
	return map[string]string{
		image.AnnotationTitle:       "kind-node",
		image.AnnotationDescription: "Gantry's kind node: Kubernetes " + o.KubeVersion + " with Gantry's control plane preloaded",
		image.AnnotationVersion:     o.Version,
		image.AnnotationRevision:    o.Meta.Revision,
		image.AnnotationSource:      o.Meta.Source,
		image.AnnotationCreated:     o.Meta.Created.UTC().Format(time.RFC3339),
		image.AnnotationVendor:      "Gantry",
	}
}

// BuildOnBase adds Gantry to a kind node image made elsewhere (o.Base):
// gantry-node-init before the base's entrypoint (host sysctls shadowed,
// restricted Docker handled), the unit that imports the preloaded images
// before kubelet starts, the images, and /kind/version set to Gantry's
// release, so that kubeadm asks for the preloaded control-plane tags (its
// own version may be another patch release of the same minor, which
// kubeadm supports). The base keeps its containerd configuration, with its
// own pause image, and its kubelet, kubeadm and CNI plugins.
func BuildOnBase(o Options) (v1.Image, error) {
	if o.KubeVersion == "" {
		return nil, fmt.Errorf("node image: the Kubernetes version is required")
	}
	cf, err := o.Base.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("base image: %w", err)
	}
	if cf.OS != o.Platform.OS || cf.Architecture != o.Platform.Arch {
		return nil, fmt.Errorf("base image is %s/%s, not %s/%s", cf.OS, cf.Architecture, o.Platform.OS, o.Platform.Arch)
	}
	entrypoint := cf.Config.Entrypoint
	if len(entrypoint) == 0 || entrypoint[0] != kindEntrypoint {
		return nil, fmt.Errorf("base image's entrypoint %q is not kind's %s: not a kind node image", entrypoint, kindEntrypoint)
	}
	files := append(initFiles(o), image.File{Path: "/etc/systemd/system/multi-user.target.wants/gantry-images.service", Link: "/etc/systemd/system/gantry-images.service"})
	layer, err := image.Layer(files, o.Meta.Created)
	if err != nil {
		return nil, fmt.Errorf("node files: %w", err)
	}
	imagesLayer, err := preloaded(o)
	if err != nil {
		return nil, err
	}
	layerType := types.OCILayer
	if mt, err := o.Base.MediaType(); err == nil && mt == types.DockerManifestSchema2 {
		layerType = types.DockerLayer
	}
	t := v1.Time{Time: o.Meta.Created.UTC()}
	img := o.Base
	for _, l := range []struct {
		layer v1.Layer
		by    string
	}{{layer, "gantry-images node: Gantry's node init and image import"}, {imagesLayer, "gantry-images node: preloaded images"}} {
		img, err = mutate.Append(img, mutate.Addendum{Layer: l.layer, MediaType: layerType,
			History: v1.History{Created: t, CreatedBy: l.by, Author: "Gantry"}})
		if err != nil {
			return nil, err
		}
	}
	cf, err = img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Config.Entrypoint = append([]string{InitPath}, entrypoint...)
	ann := annotations(o)
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	for k, v := range ann {
		cf.Config.Labels[k] = v
	}
	cf.Created = t
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	if layerType == types.DockerLayer {
		return img, nil // a Docker manifest has no annotations
	}
	return mutate.Annotations(img, ann).(v1.Image), nil
}

// kindFiles reads kind's base files. The module cache makes them read-only
// (0444); scripts and directories get 0755 as kind's Dockerfile gives them.
func kindFiles(dir string) ([]image.File, error) {
	all, err := image.DirFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("kind base files: %w", err)
	}
	var out []image.File
	for _, f := range all {
		if kindSkipped[f.Path] || strings.HasPrefix(f.Path, "/LICENSES") {
			continue
		}
		switch {
		case f.Dir:
			f.Mode = 0o755
		case f.Link != "":
		case strings.HasPrefix(f.Path, "/usr/local/bin/") || strings.HasPrefix(f.Path, "/kind/bin/"):
			f.Mode = 0o755
		default:
			f.Mode = 0o644
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("kind base files: nothing in %s", dir)
	}
	return out, nil
}

// initFiles are what every Gantry node has, on Gantry's root filesystem or
// on another base: the node init, the image import that kubelet requires,
// and /kind/version.
func initFiles(o Options) []image.File {
	return []image.File{
		{Path: InitPath, Data: nodeInit, Mode: 0o755},
		{Path: "/kind/bin/gantry-import-images", Data: importImages, Mode: 0o755},
		{Path: "/etc/systemd/system/gantry-images.service", Data: importUnit},
		{Path: "/kind/version", Data: []byte(o.KubeVersion)},
		{Path: "/etc/systemd/system/kubelet.service.requires/gantry-images.service", Link: "/etc/systemd/system/gantry-images.service"},
	}
}

func gantryFiles(o Options) ([]image.File, error) {
	files := append(initFiles(o),
		image.File{Path: "/etc/containerd/config.toml", Data: []byte(strings.Replace(containerdConfig, "SANDBOX_IMAGE", o.SandboxImage, 1))},
		image.File{Path: "/etc/cni/net.d", Dir: true},
	)
	for _, unit := range enabled {
		files = append(files, image.File{Path: "/etc/systemd/system/multi-user.target.wants/" + unit, Link: "/etc/systemd/system/" + unit})
	}
	names := make([]string, 0, len(nodeBinaries))
	for n := range nodeBinaries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		src := filepath.Join(o.BinDir, n)
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("node binary %s: %w (hack/node-image.sh builds it)", n, err)
		}
		files = append(files, image.File{Path: nodeBinaries[n], Source: src, Mode: 0o755})
	}
	spec, err := criBaseSpec(filepath.Join(o.BinDir, "ctr"))
	if err != nil {
		return nil, err
	}
	return append(files, image.File{Path: "/etc/containerd/cri-base.json", Data: spec}), nil
}

// criBaseSpec is containerd's default OCI spec (`ctr oci spec` of the ctr
// going into the image) with what kind's base image changes: a createContainer
// hook that gives each container the node's product_uuid, and no rlimits.
func criBaseSpec(ctr string) ([]byte, error) {
	out, err := exec.Command(ctr, "oci", "spec").Output()
	if err != nil {
		return nil, fmt.Errorf("%s oci spec: %w", ctr, err)
	}
	var spec map[string]any
	if err := json.Unmarshal(out, &spec); err != nil {
		return nil, fmt.Errorf("%s oci spec: %w", ctr, err)
	}
	hooks, _ := spec["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	create, _ := hooks["createContainer"].([]any)
	hooks["createContainer"] = append(create, map[string]any{"path": "/kind/bin/mount-product-files.sh"})
	spec["hooks"] = hooks
	if process, ok := spec["process"].(map[string]any); ok {
		delete(process, "rlimits")
	}
	return json.MarshalIndent(spec, "", "  ")
}

// WriteArchive writes the node image as a docker-load archive with tags.
func WriteArchive(path string, img v1.Image, refs []string) error {
	m := map[name.Reference]v1.Image{}
	for _, r := range refs {
		tag, err := name.NewTag(r, name.WeakValidation)
		if err != nil {
			return err
		}
		m[tag] = img
	}
	if err := tarball.MultiRefWriteToFile(path+".tmp", m); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
