package app

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/gantry-dev/gantry/release/image"
	"github.com/gantry-dev/gantry/release/manifests"
)

func newManifests() *cobra.Command {
	var root, layoutDir, registry, out string
	cmd := &cobra.Command{
		Use:   "manifests",
		Short: "Render config/overlays/{managed,full} into <out>/gantry-<overlay>.yaml, every image pinned by the digest of the OCI layout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			digests, err := image.LayoutDigests(layoutDir)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			work, err := os.MkdirTemp("", "gantry-manifests-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			for _, overlay := range manifests.Overlays {
				objs, err := manifests.Pin(filepath.Join(work, overlay), manifests.Dir(root, overlay), registry, digests)
				if err != nil {
					return err
				}
				data, err := manifests.YAML(objs)
				if err != nil {
					return err
				}
				file := filepath.Join(out, "gantry-"+overlay+".yaml")
				if err := os.WriteFile(file, data, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d objects\n", file, len(objs))
				for _, img := range manifests.Images(objs) {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", img)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", ".", "the repository checkout")
	f.StringVar(&layoutDir, "layout", "_output/images/oci", "the OCI layout `build` wrote")
	f.StringVar(&registry, "registry", DefaultRegistry, "registry (and path) the images are pulled from, as given to push")
	f.StringVar(&out, "out", "_output/manifests", "output directory")
	return cmd
}
