package manifests

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/internal/kustomize"
)

const root = "../.."

// digestsOf gives every image of the overlay a digest, as `make images`'
// layout would.
func digestsOf(t *testing.T, overlay string) map[string]string {
	t.Helper()
	objs, err := kustomize.Build(Dir(root, overlay))
	if err != nil {
		t.Fatal(err)
	}
	images := Images(objs)
	if len(images) == 0 {
		t.Fatalf("overlay %s has no image", overlay)
	}
	out := map[string]string{}
	for i, image := range images {
		out[image] = fmt.Sprintf("sha256:%064x", i+1)
	}
	return out
}

func TestPinReplacesEveryImage(t *testing.T) {
	for _, overlay := range Overlays {
		t.Run(overlay, func(t *testing.T) {
			digests := digestsOf(t, overlay)
			objs, err := Pin(t.TempDir(), Dir(root, overlay), "registry.example.com/gantry", digests)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for image, digest := range digests {
				name := image[strings.LastIndex(image, "/")+1 : strings.LastIndex(image, ":")]
				want = append(want, "registry.example.com/gantry/"+name+"@"+digest)
			}
			slices.Sort(want)
			if got := Images(objs); !slices.Equal(got, want) {
				t.Errorf("images %q, want %q", got, want)
			}
			data, err := YAML(objs)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count("---\n"+string(data), "---\n"); n != len(objs) {
				t.Errorf("YAML has %d documents, want %d", n, len(objs))
			}
		})
	}
}

func TestPinRefusesAnImageNotBuilt(t *testing.T) {
	digests := digestsOf(t, "managed")
	var dropped string
	for image := range digests {
		if strings.Contains(image, "/gantry-webhook:") {
			dropped = image
		}
	}
	if dropped == "" {
		t.Fatalf("the managed overlay has no gantry-webhook image: %v", digests)
	}
	delete(digests, dropped)
	_, err := Pin(t.TempDir(), Dir(root, "managed"), "gantry.local", digests)
	if err == nil || !strings.Contains(err.Error(), dropped) {
		t.Errorf("Pin without %s: %v, want an error naming it", dropped, err)
	}
}

func TestPinRefusesABadRegistry(t *testing.T) {
	if _, err := Pin(t.TempDir(), filepath.Join(root, "config", "overlays", "full"), "Not A Registry", digestsOf(t, "full")); err == nil {
		t.Error("Pin with registry \"Not A Registry\" succeeded")
	}
}
