package frameworkext

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/scheduler"
)

// ServicesPrefix is where the layer's REST services live on the secure port.
// It is outside /api and /apis, which the default system:discovery role lets
// every authenticated identity get: the services need an explicit grant
// (scheduler/config/rbac.yaml).
const ServicesPrefix = "/gantry/v1/"

// serviceMux holds the plugins' endpoints and the built-in ones.
type serviceMux struct {
	mu         sync.Mutex
	mux        *http.ServeMux
	patterns   []string
	leaderOnly map[string]bool
}

func newServiceMux() *serviceMux {
	return &serviceMux{mux: http.NewServeMux(), leaderOnly: map[string]bool{}}
}

type pluginRouter struct {
	m      *serviceMux
	plugin string
}

func (m *serviceMux) router(plugin string) Router { return pluginRouter{m: m, plugin: plugin} }

func (r pluginRouter) Get(pattern string, h http.HandlerFunc) { r.m.add(r.plugin, pattern, h, false) }
func (r pluginRouter) GetLeaderOnly(pattern string, h http.HandlerFunc) {
	r.m.add(r.plugin, pattern, h, true)
}

func (m *serviceMux) add(plugin, pattern string, h http.HandlerFunc, leaderOnly bool) {
	path := ServicesPrefix + "plugins/" + plugin + "/" + strings.TrimPrefix(pattern, "/")
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mux.HandleFunc("GET "+path, h)
	m.patterns = append(m.patterns, path)
	m.leaderOnly[path] = leaderOnly
}

// ServicesHandler serves /gantry/v1/: the plugins' endpoints, __services__ and
// nodes/{node}. Leader-only endpoints answer 503 when isLeader is false.
func (e *Extender) ServicesHandler(isLeader func() bool) http.Handler {
	builtin := http.NewServeMux()
	builtin.HandleFunc("GET "+ServicesPrefix+"__services__", func(w http.ResponseWriter, _ *http.Request) {
		e.services.mu.Lock()
		paths := append([]string{ServicesPrefix + "__services__", ServicesPrefix + "nodes/{node}"}, e.services.patterns...)
		e.services.mu.Unlock()
		slices.Sort(paths)
		WriteJSON(w, http.StatusOK, map[string][]string{"GET": paths})
	})
	builtin.HandleFunc("GET "+ServicesPrefix+"nodes/{node}", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		views := e.nodeViews
		e.mu.Unlock()
		if views == nil {
			WriteError(w, http.StatusServiceUnavailable, "the scheduler is not running yet")
			return
		}
		view, err := views(r.PathValue("node"))
		if err != nil {
			WriteError(w, http.StatusNotFound, "%v", err)
			return
		}
		WriteJSON(w, http.StatusOK, view)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := builtin.Handler(r); pattern != "" {
			builtin.ServeHTTP(w, r)
			return
		}
		e.services.mu.Lock()
		_, pattern := e.services.mux.Handler(r)
		leaderOnly := e.services.leaderOnly[strings.TrimPrefix(pattern, "GET ")]
		mux := e.services.mux
		e.services.mu.Unlock()
		if pattern == "" {
			WriteError(w, http.StatusNotFound, "no such endpoint: %s %s (see %s__services__)", r.Method, r.URL.Path, ServicesPrefix)
			return
		}
		if leaderOnly && !isLeader() {
			WriteError(w, http.StatusServiceUnavailable, "this scheduler is not the leader; ask the leader for %s", r.URL.Path)
			return
		}
		mux.ServeHTTP(w, r) // sets the path values, which Handler does not
	})
}

// ErrorMessage is the body of an error response of a service.
type ErrorMessage struct {
	Message string `json:"message"`
}

// WriteJSON writes v as an indented JSON response.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError writes an ErrorMessage response.
func WriteError(w http.ResponseWriter, code int, format string, args ...any) {
	WriteJSON(w, code, ErrorMessage{Message: fmt.Sprintf(format, args...)})
}

// NodeView is the scheduler's view of a node, as /gantry/v1/nodes/{node}
// shows it: what its cache holds there, and the pods its nominator holds
// nominated there.
type NodeView struct {
	Name             string          `json:"name"`
	Generation       int64           `json:"generation"`
	Allocatable      v1.ResourceList `json:"allocatable"`
	Requested        v1.ResourceList `json:"requested"`
	NonZeroRequested v1.ResourceList `json:"nonZeroRequested"`
	UsedPorts        []string        `json:"usedPorts,omitempty"`
	// Pods are the pods the cache holds on the node, bound or assumed. A
	// Reservation the scheduler places or holds appears among them as its
	// reserve pod: no namespace, the Reservation's name and UID
	// (scheduler/reservepod).
	Pods []NodeViewPod `json:"pods"`
	// Nominated are the pods the scheduling queue's nominator holds
	// nominated to the node: preemptors waiting for their victims to leave.
	// Their requests are those the filters count for them there (none for
	// a pod the scheduler is scheduling at that moment: the queue then
	// holds only its name). Pending Reservations that preempted are
	// nominated in the Reservation plugin's store, not in the queue, and
	// are not listed.
	Nominated []NodeViewPod     `json:"nominated,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// NodeViewPod is a pod in a NodeView.
type NodeViewPod struct {
	Namespace string          `json:"namespace,omitempty"`
	Name      string          `json:"name"`
	UID       types.UID       `json:"uid"`
	Requests  v1.ResourceList `json:"requests,omitempty"`
}

func nodeView(sched *scheduler.Scheduler, name string) (*NodeView, error) {
	ni, err := sched.Cache.GetNode(name)
	if err != nil {
		return nil, err
	}
	view := &NodeView{
		Name:             name,
		Generation:       ni.GetGeneration(),
		Allocatable:      resourceList(ni.GetAllocatable().GetMilliCPU(), ni.GetAllocatable().GetMemory(), ni.GetAllocatable().GetAllowedPodNumber()),
		Requested:        resourceList(ni.GetRequested().GetMilliCPU(), ni.GetRequested().GetMemory(), 0),
		NonZeroRequested: resourceList(ni.GetNonZeroRequested().GetMilliCPU(), ni.GetNonZeroRequested().GetMemory(), 0),
		Pods:             []NodeViewPod{},
	}
	if n := ni.Node(); n != nil {
		view.Labels = n.Labels
	}
	for ip, ports := range ni.GetUsedPorts() {
		for p := range ports {
			view.UsedPorts = append(view.UsedPorts, fmt.Sprintf("%s/%s:%d", p.Protocol, ip, p.Port))
		}
	}
	slices.Sort(view.UsedPorts)
	for _, pi := range ni.GetPods() {
		p := pi.GetPod()
		view.Pods = append(view.Pods, NodeViewPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Requests: podRequests(p)})
	}
	if sched.SchedulingQueue != nil {
		for _, pi := range sched.SchedulingQueue.NominatedPodsForNode(name) {
			p := pi.GetPod()
			view.Nominated = append(view.Nominated, NodeViewPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Requests: podRequests(p)})
		}
	}
	byName := func(a, b NodeViewPod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	}
	slices.SortFunc(view.Pods, byName)
	slices.SortFunc(view.Nominated, byName)
	return view, nil
}
