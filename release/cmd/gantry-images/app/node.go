package app

import (
	"fmt"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/spf13/cobra"

	"github.com/gantry-dev/gantry/release/image"
	"github.com/gantry-dev/gantry/release/node"
)

type nodeOptions struct {
	rootfs, kindFiles, binDir, platform string
	archives                            []string
	kubeVersion, gantryVersion          string
	sandboxImage, out, registry         string
	baseArchive                         string
	meta                                metaFlags
}

func newNode() *cobra.Command {
	o := nodeOptions{}
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Assemble the kind node image into a docker-load archive (hack/node-image.sh gathers its parts)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.rootfs, "rootfs", "", "root filesystem tarball (hack/node-rootfs.sh)")
	f.StringVar(&o.kindFiles, "kind-files", "", "images/base/files of the pinned kind module")
	f.StringVar(&o.binDir, "bin-dir", "", "directory with kubelet, kubeadm, kubectl, containerd, ctr, the shim and the CNI plugins")
	f.StringVar(&o.platform, "platform", "linux/amd64", "the node's platform")
	f.StringSliceVar(&o.archives, "archive", nil, "docker-load archive of an image to preload (repeat)")
	f.StringVar(&o.kubeVersion, "kube-version", "", "Kubernetes version kind reads from /kind/version, e.g. v1.37.2")
	f.StringVar(&o.gantryVersion, "gantry-version", "", "Gantry's version stamp")
	f.StringVar(&o.sandboxImage, "sandbox-image", "", "pause image containerd runs pods with, e.g. gantry.local/pause:3.10.2")
	f.StringVar(&o.out, "out", "_output/images", "output directory")
	f.StringVar(&o.registry, "registry", DefaultRegistry, "registry part of the node image's references")
	f.StringVar(&o.baseArchive, "base-archive", "", "docker-save archive of a kind node image (kindest/node) to build on instead of --rootfs, --kind-files and --bin-dir")
	o.meta.add(f)
	return cmd
}

func (o *nodeOptions) run(cmd *cobra.Command) error {
	required := map[string]string{"kube-version": o.kubeVersion, "gantry-version": o.gantryVersion}
	if o.baseArchive == "" {
		required["rootfs"], required["kind-files"], required["bin-dir"], required["sandbox-image"] = o.rootfs, o.kindFiles, o.binDir, o.sandboxImage
	}
	for flag, v := range required {
		if v == "" {
			return fmt.Errorf("--%s is required", flag)
		}
	}
	meta, err := o.meta.meta()
	if err != nil {
		return err
	}
	platforms, err := image.ParsePlatforms(o.platform)
	if err != nil || len(platforms) != 1 {
		return fmt.Errorf("--platform: one of linux/amd64, linux/arm64")
	}
	start := time.Now()
	var base v1.Image
	if o.baseArchive != "" {
		if base, err = tarball.ImageFromPath(o.baseArchive, nil); err != nil {
			return fmt.Errorf("--base-archive %s: %w", o.baseArchive, err)
		}
	}
	img, err := node.Build(node.Options{
		RootFS: o.rootfs, KindFiles: o.kindFiles, BinDir: o.binDir, Platform: platforms[0], Archives: o.archives,
		KubeVersion: o.kubeVersion, SandboxImage: o.sandboxImage, Version: o.gantryVersion,
		Meta: meta, Base: base,
	})
	if err != nil {
		return err
	}
	refs := []string{NodeRef(o.registry, o.kubeVersion), NodeRef(o.registry, image.TagFor(o.gantryVersion))}
	path := filepath.Join(o.out, fmt.Sprintf("kind-node.%s-%s.tar", platforms[0].OS, platforms[0].Arch))
	if err := node.WriteArchive(path, img, refs); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s); docker load -i %s\n", refs[0], digest, time.Since(start).Round(time.Second), path)
	return nil
}

// NodeRef is the reference of the node image with tag.
func NodeRef(registry, tag string) string { return registry + "/kind-node:" + tag }
