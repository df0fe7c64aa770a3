package provisioning

import (
	"container/list"
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodTemplates are the tenant's to write, as many and as large as its
// quota allows, and most are named by no request. The provisioner watches
// only their metadata (to wake the requests that name one) and reads a
// template whole, from the API server, when a request it serves needs it;
// templates read are kept, up to templateCacheBytes, for as long as their
// resourceVersion is the one the watch shows. Its memory for templates thus
// follows what it serves, not what tenants store.

// templateCacheBytes bounds the templates kept (their protobuf size): a
// few thousand ordinary ones, or 64 of 1 MiB.
const templateCacheBytes = 64 << 20

// templateCache keeps templates read, least recently used first out.
type templateCache struct {
	mu      sync.Mutex
	byKey   map[types.NamespacedName]*list.Element
	lru     list.List // of *templateEntry, most recent at the front
	bytes   int64
	maxSize int64
}

type templateEntry struct {
	key  types.NamespacedName
	t    *v1.PodTemplate
	size int64
}

// get is the kept template of key at resourceVersion rv, or nil.
func (c *templateCache) get(key types.NamespacedName, rv string) *v1.PodTemplate {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil
	}
	entry := e.Value.(*templateEntry)
	if entry.t.ResourceVersion != rv {
		return nil
	}
	c.lru.MoveToFront(e)
	return entry.t
}

// put keeps t, dropping the least recently used templates past the bound.
// A template larger than the bound alone is not kept.
func (c *templateCache) put(t *v1.PodTemplate) {
	size := int64(t.Size())
	key := types.NamespacedName{Namespace: t.Namespace, Name: t.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[types.NamespacedName]*list.Element{}
	}
	if e, ok := c.byKey[key]; ok {
		c.remove(e)
	}
	limit := c.maxSize
	if limit == 0 {
		limit = templateCacheBytes
	}
	if size > limit {
		return
	}
	for c.bytes+size > limit {
		c.remove(c.lru.Back())
	}
	c.byKey[key] = c.lru.PushFront(&templateEntry{key: key, t: t, size: size})
	c.bytes += size
}

func (c *templateCache) remove(e *list.Element) {
	entry := e.Value.(*templateEntry)
	c.lru.Remove(e)
	delete(c.byKey, entry.key)
	c.bytes -= entry.size
}

// podTemplate reads the PodTemplate of key: its resourceVersion from the
// metadata watch, the template from what was kept at that version, else
// from the API server. The metadata watch says NotFound for a template
// it does not show.
func (r *Reconciler) podTemplate(ctx context.Context, key types.NamespacedName) (*v1.PodTemplate, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(v1.SchemeGroupVersion.WithKind("PodTemplate"))
	if err := r.Client.Get(ctx, key, meta); err != nil {
		return nil, err
	}
	if t := r.templates.get(key, meta.ResourceVersion); t != nil {
		return t, nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	t := &v1.PodTemplate{}
	if err := reader.Get(ctx, key, t); err != nil {
		return nil, err
	}
	r.templates.put(t)
	return t, nil
}
