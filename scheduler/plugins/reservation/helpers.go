package reservation

import (
	"sync"

	v1 "k8s.io/api/core/v1"
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
	adjusted fwk.NodeInfo
}

func newChosenMap() *chosenMap { return &chosenMap{m: map[string]chosen{}} }

func (m *chosenMap) set(node string, c *candidate, adjusted fwk.NodeInfo) {
	m.mu.Lock()
	m.m[node] = chosen{c: c, adjusted: adjusted}
	m.mu.Unlock()
}

func (m *chosenMap) get(node string) (*candidate, fwk.NodeInfo, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ch, ok := m.m[node]
	return ch.c, ch.adjusted, ok
}
