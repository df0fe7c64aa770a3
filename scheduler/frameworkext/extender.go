package frameworkext

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	gantryinformers "github.com/gantry-dev/gantry/crds/client/informers/externalversions"
)

// Extender is the extension layer of one scheduler process. Create it with
// New, wrap Gantry's plugin factories with Wrap before the scheduler is
// built, and Attach it to the built scheduler before it runs.
type Extender struct {
	mu       sync.Mutex
	client   gantryclient.Interface
	informer gantryinformers.SharedInformerFactory
	// profiles holds, per framework being built (the handle given to plugin
	// factories), the Gantry plugins instantiated in it.
	profiles    map[fwk.Handle]*profileState
	services    *serviceMux
	controllers []Controller
	seen        map[string]bool // plugin names whose services and controllers are collected
	attached    *scheduler.Scheduler

	debugScores atomic.Int32
	// crdSyncTimeout bounds the wait for Gantry's informers at start.
	crdSyncTimeout atomic.Int64
	nodeViews      func(name string) (any, error)
	// shared holds the values of SharedKeys, by key.
	shared map[any]any
}

type profileState struct {
	plugins map[string]fwk.Plugin
	// hooks, in order, once the framework is built (Attach)
	preFilter []PreFilterTransformer
	filter    []FilterTransformer
	score     []ScoreTransformer
	hint      []NodeHinter
}

// New returns an extension layer with no plugins.
func New() *Extender {
	return &Extender{
		profiles: map[fwk.Handle]*profileState{},
		services: newServiceMux(),
		seen:     map[string]bool{},
		shared:   map[any]any{},
	}
}

// Wrap returns registry with every factory wrapped by the layer's proxy.
func (e *Extender) Wrap(registry frameworkruntime.Registry) frameworkruntime.Registry {
	out := make(frameworkruntime.Registry, len(registry))
	for name, factory := range registry {
		out[name] = e.PluginFactoryProxy(name, factory)
	}
	return out
}

// PluginFactoryProxy wraps a plugin factory: the plugin is built with an
// ExtendedHandle, and the optional interfaces it implements are registered.
func (e *Extender) PluginFactoryProxy(name string, factory frameworkruntime.PluginFactory) frameworkruntime.PluginFactory {
	return func(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		eh, err := e.handleFor(h)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: %w", name, err)
		}
		p, err := factory(ctx, args, eh)
		if err != nil {
			return nil, err
		}
		if err := e.register(h, name, p); err != nil {
			return nil, fmt.Errorf("plugin %s: %w", name, err)
		}
		return p, nil
	}
}

func (e *Extender) handleFor(h fwk.Handle) (*extendedHandle, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client == nil {
		cfg := h.KubeConfig()
		if cfg == nil {
			return nil, fmt.Errorf("the framework handle has no kubeconfig to build Gantry's clientset from")
		}
		// The scheduler talks protobuf to kube-apiserver; custom resources
		// only speak JSON.
		cfg = rest.CopyConfig(cfg)
		cfg.ContentType = runtime.ContentTypeJSON
		cfg.AcceptContentTypes = runtime.ContentTypeJSON
		client, err := gantryclient.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("building Gantry's clientset: %w", err)
		}
		e.client = client
		e.informer = gantryinformers.NewSharedInformerFactory(client, 0)
	}
	ps := e.profiles[h]
	if ps == nil {
		ps = &profileState{plugins: map[string]fwk.Plugin{}}
		e.profiles[h] = ps
	}
	return &extendedHandle{Handle: h, ext: e, profile: ps}, nil
}

func (e *Extender) register(h fwk.Handle, name string, p fwk.Plugin) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.profiles[h].plugins[name] = p
	if e.seen[name] {
		return nil
	}
	e.seen[name] = true
	if sp, ok := p.(APIServiceProvider); ok {
		sp.RegisterEndpoints(e.services.router(name))
	}
	if cp, ok := p.(ControllerProvider); ok {
		cs, err := cp.NewControllers()
		if err != nil {
			return fmt.Errorf("creating controllers: %w", err)
		}
		e.controllers = append(e.controllers, cs...)
	}
	return nil
}

// Attach wraps the profiles of the built scheduler so that phase hooks and
// score debugging run, and hands the scheduler to SchedulerAttacher plugins.
// It must be called before the scheduler runs; calling it again for the same
// scheduler does nothing.
func (e *Extender) Attach(sched *scheduler.Scheduler) error {
	e.mu.Lock()
	if e.attached == sched {
		e.mu.Unlock()
		return nil
	}
	if e.attached != nil {
		e.mu.Unlock()
		return fmt.Errorf("the extension layer is already attached to another scheduler")
	}
	e.attached = sched
	e.nodeViews = func(name string) (any, error) { return nodeView(sched, name) }
	e.mu.Unlock()

	attachers := map[SchedulerAttacher]bool{}
	for name, f := range sched.Profiles {
		ps := e.profiles[fwk.Handle(f)]
		if ps == nil {
			continue // no Gantry plugin in this profile: leave it as upstream built it
		}
		ps.orderHooks(f.ListPlugins())
		sched.Profiles[name] = &extendedFramework{Framework: f, ext: e, profile: ps}
		for _, p := range ps.plugins {
			if a, ok := p.(SchedulerAttacher); ok {
				attachers[a] = true
			}
		}
	}
	// Attach in a stable order: plugin name, then profile.
	ordered := make([]SchedulerAttacher, 0, len(attachers))
	for a := range attachers {
		ordered = append(ordered, a)
	}
	sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].Name() < ordered[j].Name() })
	for _, a := range ordered {
		if err := a.AttachScheduler(sched); err != nil {
			return fmt.Errorf("plugin %s: %w", a.Name(), err)
		}
	}
	return nil
}

// orderHooks lists the profile's hooks in the order their plugins appear in
// the matching extension point (PreFilter, Filter, Score; node hints follow
// PreFilter); plugins that are not in that list follow, by name.
func (ps *profileState) orderHooks(enabled *config.Plugins) {
	ps.preFilter = collect[PreFilterTransformer](ps.plugins, pluginNames(enabled, func(p *config.Plugins) config.PluginSet { return p.PreFilter }))
	ps.filter = collect[FilterTransformer](ps.plugins, pluginNames(enabled, func(p *config.Plugins) config.PluginSet { return p.Filter }))
	ps.score = collect[ScoreTransformer](ps.plugins, pluginNames(enabled, func(p *config.Plugins) config.PluginSet { return p.Score }))
	ps.hint = collect[NodeHinter](ps.plugins, pluginNames(enabled, func(p *config.Plugins) config.PluginSet { return p.PreFilter }))
}

func pluginNames(enabled *config.Plugins, point func(*config.Plugins) config.PluginSet) []string {
	if enabled == nil {
		return nil
	}
	var names []string
	for _, p := range point(enabled).Enabled {
		names = append(names, p.Name)
	}
	return names
}

func collect[T fwk.Plugin](plugins map[string]fwk.Plugin, order []string) []T {
	var out []T
	done := map[string]bool{}
	for _, name := range order {
		if t, ok := plugins[name].(T); ok && !done[name] {
			out = append(out, t)
			done[name] = true
		}
	}
	rest := make([]string, 0, len(plugins))
	for name := range plugins {
		if !done[name] {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	for _, name := range rest {
		if t, ok := plugins[name].(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// StartInformers starts Gantry's shared informers (those plugins asked for).
func (e *Extender) StartInformers(ctx context.Context) {
	if inf := e.informers(); inf != nil {
		inf.Start(ctx.Done())
	}
}

// DefaultCRDSyncTimeout is how long the scheduler waits at start for the
// informers of Gantry's custom resources before it schedules without them.
const DefaultCRDSyncTimeout = 30 * time.Second

// SetCRDSyncTimeout sets how long the scheduler waits at start for Gantry's
// informers (DefaultCRDSyncTimeout unless set).
func (e *Extender) SetCRDSyncTimeout(d time.Duration) { e.crdSyncTimeout.Store(int64(d)) }

// CRDSyncTimeout is how long the scheduler waits at start for Gantry's
// informers.
func (e *Extender) CRDSyncTimeout() time.Duration {
	if d := time.Duration(e.crdSyncTimeout.Load()); d > 0 {
		return d
	}
	return DefaultCRDSyncTimeout
}

// WaitForCacheSync waits for Gantry's informers, or fails when ctx ends first.
func (e *Extender) WaitForCacheSync(ctx context.Context) error {
	inf := e.informers()
	if inf == nil {
		return nil
	}
	for typ, ok := range inf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	return nil
}

func (e *Extender) informers() gantryinformers.SharedInformerFactory {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.informer
}

// RunControllers starts every plugin controller; they stop when ctx ends,
// which is when this scheduler stops leading.
func (e *Extender) RunControllers(ctx context.Context) {
	e.mu.Lock()
	cs := slices.Clone(e.controllers)
	e.mu.Unlock()
	logger := klog.FromContext(ctx)
	for _, c := range cs {
		logger.Info("Starting plugin controller", "controller", c.Name())
		go func() {
			defer logger.Info("Plugin controller stopped", "controller", c.Name())
			c.Run(ctx)
		}()
	}
}

// MaxDebugScores is the most nodes a score-debug table shows. Larger values
// are clamped to it: the table is built for every scored pod, on the
// scheduling path, so its size must not follow a runtime knob.
const MaxDebugScores = 50

// SetDebugScores sets how many top nodes the score-debug table shows,
// clamped to [0, MaxDebugScores]; 0 disables it. It returns the value set.
func (e *Extender) SetDebugScores(n int32) int32 {
	n = min(max(n, 0), MaxDebugScores)
	e.debugScores.Store(n)
	return n
}

// SetDebugScoresString is SetDebugScores for PUT /debug/flags/s.
func (e *Extender) SetDebugScoresString(v string) (string, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil || n < 0 {
		return "", fmt.Errorf("score-debug level must be an integer from 0 to %d, got %q", MaxDebugScores, v)
	}
	set := e.SetDebugScores(int32(n))
	if int64(set) != n {
		return fmt.Sprintf("successfully set score debugging to top %d nodes (%d is the most; the tables are logged at verbosity 2)", set, MaxDebugScores), nil
	}
	return fmt.Sprintf("successfully set score debugging to top %d nodes (the tables are logged at verbosity 2)", set), nil
}

// DebugScores is the current number of nodes in the score-debug table.
func (e *Extender) DebugScores() int32 { return e.debugScores.Load() }

// extendedHandle is the ExtendedHandle given to Gantry's plugins. Its
// RunFilterPluginsWithNominatedPods runs the profile's filter hooks, so a
// plugin that simulates filtering (e.g. preemption) sees what the scheduling
// cycle sees.
type extendedHandle struct {
	fwk.Handle
	ext     *Extender
	profile *profileState
}

var _ ExtendedHandle = &extendedHandle{}

func (h *extendedHandle) GantryClientSet() gantryclient.Interface { return h.ext.client }
func (h *extendedHandle) GantryInformerFactory() gantryinformers.SharedInformerFactory {
	return h.ext.informer
}
func (h *extendedHandle) Extender() *Extender { return h.ext }

func (h *extendedHandle) RunFilterPluginsWithNominatedPods(ctx context.Context, state fwk.CycleState, pod *v1.Pod, info fwk.NodeInfo) *fwk.Status {
	pod, info, st := h.profile.beforeFilter(ctx, state, pod, info)
	if !st.IsSuccess() {
		return st
	}
	return h.Handle.RunFilterPluginsWithNominatedPods(ctx, state, pod, info)
}

// Compile-time checks that the wrapper keeps the upstream interface.
var _ framework.Framework = &extendedFramework{}
