package provisioning

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestTemplateCacheBounded: templates are kept at their resourceVersion, up
// to the byte bound, least recently used out first; one larger than the
// bound is not kept.
func TestTemplateCacheBounded(t *testing.T) {
	tmpl := func(name, rv string, bytes int) *wrappers.PodTemplateWrapper {
		w := wrappers.MakePodTemplate(name, "ns").Requests("cpu", "1")
		w.ResourceVersion = rv
		w.Annotations = map[string]string{"pad": strings.Repeat("x", bytes)}
		return w
	}
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }
	a := tmpl("a", "1", 400).Obj()
	c := &templateCache{maxSize: int64(3 * a.Size())}
	c.put(a)
	if c.get(key("a"), "1") != a || c.get(key("a"), "2") != nil {
		t.Fatal("a kept template is found at its resourceVersion only")
	}
	c.put(tmpl("b", "1", 400).Obj())
	c.put(tmpl("c", "1", 400).Obj())
	c.get(key("a"), "1") // a is now the most recently used
	c.put(tmpl("d", "1", 400).Obj())
	if c.get(key("b"), "1") != nil || c.get(key("a"), "1") == nil || c.get(key("d"), "1") == nil {
		t.Error("the least recently used template (b) was not the one dropped")
	}
	if c.bytes > c.maxSize {
		t.Errorf("%d bytes kept, bound %d", c.bytes, c.maxSize)
	}
	c.put(tmpl("huge", "1", 4000).Obj())
	if c.get(key("huge"), "1") != nil || c.get(key("a"), "1") == nil {
		t.Error("a template larger than the bound was kept, or pushed others out")
	}
}

// TestPodTemplateReadOnceAVersion: a template is read from the API server
// once per resourceVersion the metadata shows.
func TestPodTemplateReadOnceAVersion(t *testing.T) {
	ctx := context.Background()
	pt := wrappers.MakePodTemplate("workers", "ns").Requests("cpu", "1").Obj()
	r, c := fakeReconciler(t, time.Now(), pt)
	reads := &countingReader{Reader: c}
	r.APIReader = reads
	for range 3 {
		if _, err := r.podTemplate(ctx, key(pt)); err != nil {
			t.Fatal(err)
		}
	}
	if reads.n != 1 {
		t.Errorf("%d reads of an unchanged template, want 1", reads.n)
	}
	got, _ := r.podTemplate(ctx, key(pt))
	got = got.DeepCopy()
	got.Template.Labels = map[string]string{"changed": "yes"}
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	after, err := r.podTemplate(ctx, key(pt))
	if err != nil || reads.n != 2 || after.Template.Labels["changed"] != "yes" {
		t.Errorf("after a change: %d reads, labels %v, %v; want the new version, read once more", reads.n, after.Template.Labels, err)
	}
}

func key(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }

// countingReader counts the reads it passes on.
type countingReader struct {
	client.Reader
	n int
}

func (c *countingReader) Get(ctx context.Context, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n++
	return c.Reader.Get(ctx, k, obj, opts...)
}
