// Package app is gantry-images' command line: `build` assembles the images
// into an OCI layout and docker-load archives, `push` copies the layout to a
// registry, `node` builds the kind node image, `manifests` renders the
// kustomize overlays with the images pinned by digest.
package app

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	"github.com/gantry-dev/gantry/release/image"
)

// DefaultRegistry is the registry part of the images' names when none is
// given: not a real host, so nothing is pulled by mistake.
const DefaultRegistry = "gantry.local"

type buildOptions struct {
	binDir, out, registry, platforms string
	tarballPlatforms                 string
	only                             []string
	meta                             metaFlags
	versions                         image.Versions
}

// NewCommand is the root command.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "gantry-images",
		Short:         "Assemble and push Gantry's OCI images (no Docker daemon needed)",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newBuild(), newPush(), newNode(), newManifests())
	return root
}

func newBuild() *cobra.Command {
	o := buildOptions{}
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Assemble every image from <bin-dir>/<os>_<arch>/ into <out>/oci and <out>/*.tar",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.binDir, "bin-dir", "_output/bin", "directory with one <os>_<arch> subdirectory of static binaries per platform")
	f.StringVar(&o.out, "out", "_output/images", "output directory: oci/ (an OCI image layout), <name>.<os>-<arch>.tar, digests.txt")
	f.StringVar(&o.registry, "registry", DefaultRegistry, "registry part of the images' references")
	f.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "platforms of the multi-arch indexes")
	f.StringVar(&o.tarballPlatforms, "tarball-platforms", "", "platforms to write docker-load archives for (default: the first of --platforms)")
	f.StringSliceVar(&o.only, "only", nil, "build only these images (default: all)")
	o.meta.add(f)
	f.StringVar(&o.versions.Kube, "kube-version", "", "pinned Kubernetes version, e.g. v1.37.2 (required)")
	f.StringVar(&o.versions.Gantry, "gantry-version", "", "Gantry's version stamp, e.g. v1.37.2+gantry.0123456789ab (required)")
	f.StringVar(&o.versions.Etcd, "etcd-version", "", "etcd version, e.g. 3.6.8 (required)")
	f.StringVar(&o.versions.CoreDNS, "coredns-version", "", "CoreDNS version, e.g. v1.14.2 (required)")
	f.StringVar(&o.versions.Kwok, "kwok-version", "", "kwok version, e.g. v0.8.0 (required)")
	f.StringVar(&o.versions.Kueue, "kueue-version", "", "Kueue version, e.g. v0.17.0 (required)")
	f.StringVar(&o.versions.Pause, "pause-version", "", "pause image tag, the one the node's containerd names as its sandbox image, e.g. 3.10 (required)")
	return cmd
}

func (o *buildOptions) run(cmd *cobra.Command) error {
	for flag, v := range map[string]string{
		"kube-version": o.versions.Kube, "gantry-version": o.versions.Gantry,
		"etcd-version": o.versions.Etcd, "coredns-version": o.versions.CoreDNS, "kwok-version": o.versions.Kwok, "pause-version": o.versions.Pause,
		"kueue-version": o.versions.Kueue,
	} {
		if v == "" {
			return fmt.Errorf("--%s is required", flag)
		}
	}
	meta, err := o.meta.meta()
	if err != nil {
		return err
	}
	if _, err := name.NewRegistry(strings.SplitN(o.registry, "/", 2)[0], name.WeakValidation); err != nil {
		return fmt.Errorf("--registry: %w", err)
	}
	platforms, err := image.ParsePlatforms(o.platforms)
	if err != nil {
		return fmt.Errorf("--platforms: %w", err)
	}
	tarPlatforms := platforms[:1]
	if o.tarballPlatforms != "" {
		if tarPlatforms, err = image.ParsePlatforms(o.tarballPlatforms); err != nil {
			return fmt.Errorf("--tarball-platforms: %w", err)
		}
	}
	for _, p := range tarPlatforms {
		if !slices.Contains(platforms, p) {
			return fmt.Errorf("--tarball-platforms: %s is not in --platforms", p)
		}
	}
	components, err := selectComponents(image.Components(o.versions), o.only)
	if err != nil {
		return err
	}

	b := &image.Builder{BinDir: o.binDir, Meta: meta}
	built, err := b.BuildAll(components, platforms)
	if err != nil {
		return err
	}
	layoutDir := filepath.Join(o.out, "oci")
	if err := image.WriteLayout(layoutDir, o.registry, built); err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	for _, p := range tarPlatforms {
		if err := image.WriteTarballs(o.out, o.registry, built, p); err != nil {
			return fmt.Errorf("archives for %s: %w", p, err)
		}
	}
	digests, err := os.Create(filepath.Join(o.out, "digests.txt"))
	if err != nil {
		return err
	}
	defer digests.Close()
	if err := image.Summary(digests, o.registry, built); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "OCI layout %s; docker load -i %s\n", layoutDir, filepath.Join(o.out, "<name>.<os>-<arch>.tar"))
	return image.Summary(out, o.registry, built)
}

func selectComponents(all []image.Component, only []string) ([]image.Component, error) {
	if len(only) == 0 {
		return all, nil
	}
	var out []image.Component
	for _, n := range only {
		i := slices.IndexFunc(all, func(c image.Component) bool { return c.Name == n })
		if i < 0 {
			var names []string
			for _, c := range all {
				names = append(names, c.Name)
			}
			return nil, fmt.Errorf("--only: no image %q (have %s)", n, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

func newPush() *cobra.Command {
	var layoutDir, registry string
	var insecure bool
	cmd := &cobra.Command{
		Use:   "push",
		Short: "Push every image of the OCI layout to --registry (credentials from the docker config, as crane does)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if registry == "" {
				return fmt.Errorf("--registry is required, e.g. registry.example.com/gantry")
			}
			var opts []remote.Option
			if insecure {
				opts = append(opts, remote.WithTransport(insecureTransport()))
			}
			pushed, err := image.Push(layoutDir, registry, opts...)
			for _, ref := range pushed {
				fmt.Fprintln(cmd.OutOrStdout(), ref)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&layoutDir, "layout", "_output/images/oci", "the OCI layout `build` wrote")
	cmd.Flags().StringVar(&registry, "registry", "", "registry and optional path to push to")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "accept a registry's self-signed TLS certificate (plain HTTP is used for localhost and *.local anyway)")
	return cmd
}
