package app

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/gantry-dev/gantry/release/image"
)

// metaFlags are the flags every image-making command takes about the build
// the images come from.
type metaFlags struct{ revision, source, created string }

func (m *metaFlags) add(f *pflag.FlagSet) {
	f.StringVar(&m.revision, "revision", "", "Gantry commit (required)")
	f.StringVar(&m.source, "source", "https://github.com/gantry-dev/gantry", "where Gantry's source can be had")
	f.StringVar(&m.created, "created", "", "RFC 3339 time every timestamp in the images gets: the commit's time (required)")
}

func (m *metaFlags) meta() (image.Meta, error) {
	if m.revision == "" {
		return image.Meta{}, fmt.Errorf("--revision is required")
	}
	if m.created == "" {
		return image.Meta{}, fmt.Errorf("--created is required")
	}
	created, err := time.Parse(time.RFC3339, m.created)
	if err != nil {
		return image.Meta{}, fmt.Errorf("--created: %w", err)
	}
	return image.Meta{Revision: m.revision, Source: m.source, Created: created}, nil
}
