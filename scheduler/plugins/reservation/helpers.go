package reservation

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
)

func podRequests(p *v1.Pod) v1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}

// chosenMap records, per node, the reservation the filter hook used and the
// adjusted node it handed on. Filters run in parallel over nodes.
type chosenMap struct {
	mu sync.RWMutex
	m  map[string]chosen
}

type chosen struct {
	c        *candidate
	whole    bool // c holds the whole pod
	adjusted fwk.NodeInfo
}

func newChosenMap() *chosenMap { return &chosenMap{m: map[string]chosen{}} }

func (m *chosenMap) set(node string, c *candidate, whole bool, adjusted fwk.NodeInfo) {
	m.mu.Lock()
	m.m[node] = chosen{c: c, whole: whole, adjusted: adjusted}
	m.mu.Unlock()
}

func (m *chosenMap) get(node string) (chosen, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ch, ok := m.m[node]
	return ch, ok
}

// Subtract returns a − Σ bs, per resource of a, floored at zero.
func Subtract(a v1.ResourceList, bs ...v1.ResourceList) v1.ResourceList {
	out := make(v1.ResourceList, len(a))
	for name, q := range a {
		left := q.DeepCopy()
		for _, b := range bs {
			if u, ok := b[name]; ok {
				left.Sub(u)
			}
		}
		if left.Sign() < 0 {
			left = *resource.NewQuantity(0, q.Format)
		}
		out[name] = left
	}
	return out
}

// Sum adds resource lists, per resource name; status.allocated is the Sum
// of the owners' requests.
func Sum(ls ...v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for _, l := range ls {
		for name, q := range l {
			cur := out[name]
			cur.Add(q)
			out[name] = cur
		}
	}
	return out
}

// fits reports whether req fits in avail for every resource req names
// (zero requests always fit).
func fits(req, avail v1.ResourceList) bool {
	for name, q := range req {
		if q.IsZero() {
			continue
		}
		a, ok := avail[name]
		if !ok || a.Cmp(q) < 0 {
			return false
		}
	}
	return true
}
