package imagetest

import (
	"archive/tar"
	"errors"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Entry is one entry of a tar stream: its header, and a regular file's content.
type Entry struct {
	Header  *tar.Header
	Content string
}

// Entries reads a tar stream, in order.
func Entries(t testing.TB, r io.Reader) []Entry {
	t.Helper()
	tr := tar.NewReader(r)
	var out []Entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		e := Entry{Header: h}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			e.Content = string(b)
		}
		out = append(out, e)
	}
}

// Filesystem is an image's flattened filesystem by path, as mutate.Extract
// gives it (clean paths: directories have no trailing slash).
func Filesystem(t testing.TB, img v1.Image) map[string]Entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]Entry{}
	for _, e := range Entries(t, rc) {
		out[e.Header.Name] = e
	}
	return out
}
