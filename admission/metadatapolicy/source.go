// Package metadatapolicy keeps the compiled MetadataPolicies of a cluster
// (Source) and applies them in kube-apiserver (the MetadataPolicy admission
// plugin). gantry-webhook uses the same Source and engine.
package metadatapolicy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// Resources of the policy API.
var (
	MetadataPoliciesResource        = policyv1alpha1.SchemeGroupVersion.WithResource("metadatapolicies")
	ClusterMetadataPoliciesResource = policyv1alpha1.SchemeGroupVersion.WithResource("clustermetadatapolicies")
)

// snapshot is an immutable view of every compiled policy, in engine order.
type snapshot struct {
	cluster    []*engine.Policy
	namespaced map[string][]*engine.Policy
}

// Source watches MetadataPolicies and ClusterMetadataPolicies and serves
// compiled, ordered snapshots of them without locking on the request path.
// Policies that do not compile (which API validation should prevent, but an
// engine upgrade may cause) are never half-applied: one with reject rules
// rejects every request it targets (Fallback), one without is skipped; both
// are logged and say so in their Ready condition.
type Source struct {
	dynamic   dynamic.Interface
	discovery discovery.DiscoveryInterface

	current atomic.Pointer[snapshot]
	// state: not ready until the API's presence is known, then ready once
	// informers synced, or at once when the API is absent.
	absent    atomic.Bool
	seen      atomic.Bool // the API was seen installed: never absent again
	synced    func() bool
	syncedMu  sync.Mutex
	loggedOff sync.Once

	mu      sync.Mutex
	objects map[string]*entry // by kind/namespace/name
	// changed is signalled (without blocking) after every change.
	changed chan struct{}
}

// entry is one policy object: compiled, or why it does not compile, and the
// status it carries.
type entry struct {
	kind, namespace, name string
	generation            int64
	policy                *engine.Policy // nil when invalid
	invalid               string
	// fallback stands in for an invalid policy with reject rules: it
	// rejects what the policy targets (engine.Invalid).
	fallback *engine.Policy
	status   policyv1alpha1.MetadataPolicyStatus
}

// NewSource returns a source; Run starts it.
func NewSource(dyn dynamic.Interface, disc discovery.DiscoveryInterface) *Source {
	s := &Source{dynamic: dyn, discovery: disc, objects: map[string]*entry{}, changed: make(chan struct{}, 1)}
	s.current.Store(&snapshot{namespaced: map[string][]*engine.Policy{}})
	return s
}

// Ready reports whether the source can answer: its informers synced, or the
// policy API is not installed (then there are no policies).
func (s *Source) Ready() bool {
	if s.absent.Load() {
		return true
	}
	s.syncedMu.Lock()
	synced := s.synced
	s.syncedMu.Unlock()
	return synced != nil && synced()
}

// Policies returns the policies that may apply in a namespace, in engine
// order: cluster policies, then the namespace's own. The result is shared
// and must not be modified; it is allocated only when both kinds exist, so
// the admission path allocates nothing for namespaces without policies.
func (s *Source) Policies(namespace string) []*engine.Policy {
	snap := s.current.Load()
	local := snap.namespaced[namespace]
	switch {
	case len(local) == 0:
		return snap.cluster
	case len(snap.cluster) == 0:
		return local
	}
	out := make([]*engine.Policy, 0, len(snap.cluster)+len(local))
	return append(append(out, snap.cluster...), local...)
}

// Run waits until the API server answers, starts informers when the policy
// API is installed (looking again every second while it is not), and returns
// when ctx ends.
func (s *Source) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("metadatapolicy-source")
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		installed, err := s.apiInstalled(ctx)
		if err != nil {
			logger.V(2).Info("Waiting to learn whether the policy API is installed", "err", err)
			return false, nil
		}
		if !installed {
			s.absent.Store(true)
			s.loggedOff.Do(func() {
				logger.Info("The policy.gantry.dev CustomResourceDefinitions are not installed: MetadataPolicy admits everything until they are")
			})
			return false, nil
		}
		return true, nil
	})
	if ctx.Err() != nil {
		return
	}
	s.start(ctx, logger)
}

// CRDResource is the CustomResourceDefinition resource, read through the
// dynamic client.
var CRDResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// PolicyCRDName is the name of the MetadataPolicy CRD.
var PolicyCRDName = MetadataPoliciesResource.Resource + "." + policyv1alpha1.GroupName

// apiInstalled reports whether the policy API is installed. The CRD object
// decides: it is read from storage, so it is there from the server's first
// answer, while discovery of a CRD's group can answer 404 for a moment at
// start-up (taking that for "absent" would admit requests unchecked). Only
// when the CRD cannot be read at all (no RBAC for it, in the webhook) does
// discovery decide. Once the API has been seen it is never absent again.
func (s *Source) apiInstalled(ctx context.Context) (bool, error) {
	if s.seen.Load() {
		return true, nil
	}
	installed, err := s.crdInstalled(ctx)
	if err != nil {
		if installed, err = s.discovered(); err != nil {
			return false, err
		}
	}
	if installed {
		s.seen.Store(true)
	}
	return installed, nil
}

func (s *Source) crdInstalled(ctx context.Context) (bool, error) {
	_, err := s.dynamic.Resource(CRDResource).Get(ctx, PolicyCRDName, metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, err
	}
}

func (s *Source) discovered() (bool, error) {
	list, err := s.discovery.ServerResourcesForGroupVersion(policyv1alpha1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == MetadataPoliciesResource.Resource {
			return true, nil
		}
	}
	return false, nil
}

func (s *Source) start(ctx context.Context, logger klog.Logger) {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(s.dynamic, 0)
	var syncs []cache.InformerSynced
	for _, gvr := range []schema.GroupVersionResource{ClusterMetadataPoliciesResource, MetadataPoliciesResource} {
		inf := factory.ForResource(gvr).Informer()
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.upsert(logger, obj) },
			UpdateFunc: func(_, obj any) { s.upsert(logger, obj) },
			DeleteFunc: func(obj any) { s.remove(obj) },
		})
		if err != nil {
			logger.Error(err, "Adding policy event handler")
		}
		syncs = append(syncs, inf.HasSynced)
	}
	s.syncedMu.Lock()
	s.synced = func() bool {
		for _, f := range syncs {
			if !f() {
				return false
			}
		}
		return true
	}
	s.syncedMu.Unlock()
	// From here the source is ready only once the informers synced.
	s.seen.Store(true)
	s.absent.Store(false)
	factory.Start(ctx.Done())
	logger.Info("Watching MetadataPolicies")
}

func objectKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// Compile converts an unstructured policy and compiles it; errors name the
// offending fields.
func Compile(u *unstructured.Unstructured) (*engine.Policy, field.ErrorList) {
	var (
		p    *engine.Policy
		errs field.ErrorList
		uid  types.UID
	)
	switch u.GetKind() {
	case "ClusterMetadataPolicy":
		var obj policyv1alpha1.ClusterMetadataPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj); err != nil {
			return nil, field.ErrorList{field.Invalid(field.NewPath("spec"), "", err.Error())}
		}
		p, errs = engine.CompileCluster(&obj)
		uid = obj.UID
	case "MetadataPolicy":
		var obj policyv1alpha1.MetadataPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj); err != nil {
			return nil, field.ErrorList{field.Invalid(field.NewPath("spec"), "", err.Error())}
		}
		p, errs = engine.CompileNamespaced(&obj)
		uid = obj.UID
	default:
		return nil, field.ErrorList{field.NotSupported(field.NewPath("kind"), u.GetKind(), []string{"MetadataPolicy", "ClusterMetadataPolicy"})}
	}
	if errs != nil {
		return nil, boundErrors(errs)
	}
	p.UID = uid
	return p, nil
}

// maxCompileErrors and maxCompileErrorItemBytes bound the errors Compile
// returns: a policy is bounded in size only by the request limit, and its
// error text goes back to the client and into logs and status.
const (
	maxCompileErrors         = 20
	maxCompileErrorItemBytes = 512
)

// boundErrors keeps the first maxCompileErrors errors, drops the value of
// any whose text is longer than maxCompileErrorItemBytes and clips its
// detail, and counts the others in a last error.
func boundErrors(errs field.ErrorList) field.ErrorList {
	out := make(field.ErrorList, 0, min(len(errs), maxCompileErrors)+1)
	for _, e := range errs[:min(len(errs), maxCompileErrors)] {
		if len(e.Error()) > maxCompileErrorItemBytes {
			c := *e
			c.BadValue = field.OmitValueType{}
			if len(c.Detail) > maxCompileErrorItemBytes/2 {
				c.Detail = c.Detail[:maxCompileErrorItemBytes/2] + "..."
			}
			if len(c.Field) > maxCompileErrorItemBytes/2 {
				c.Field = c.Field[:maxCompileErrorItemBytes/2] + "..."
			}
			e = &c
		}
		out = append(out, e)
	}
	if more := len(errs) - maxCompileErrors; more > 0 {
		out = append(out, field.Forbidden(field.NewPath("spec"), fmt.Sprintf("and %d more errors", more)))
	}
	return out
}

// Fallback returns the stand-in of an invalid policy that has an enforced
// reject rule (engine.Invalid), or nil when it has none. It reads the object
// leniently: what cannot be read widens what the stand-in rejects.
func Fallback(u *unstructured.Unstructured, reason string) *engine.Policy {
	enforcement, _, _ := unstructured.NestedString(u.Object, "spec", "enforcement")
	rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
	rejects := false
	for _, r := range rules {
		if m, ok := r.(map[string]any); ok {
			if v, _, _ := unstructured.NestedBool(m, "policyAction", "reject"); v {
				rejects = true
				break
			}
		}
	}
	if !rejects {
		return nil
	}
	var targets *policyv1alpha1.Targets
	if t, found, _ := unstructured.NestedMap(u.Object, "spec", "targets"); found {
		targets = &policyv1alpha1.Targets{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(t, targets) != nil {
			targets = nil
		}
	}
	var nsSel *metav1.LabelSelector
	ns := u.GetNamespace()
	kind := engine.KindNamespaced
	if u.GetKind() == engine.KindCluster {
		ns, kind = "", engine.KindCluster
		if m, found, _ := unstructured.NestedMap(u.Object, "spec", "namespaceSelector"); found {
			nsSel = &metav1.LabelSelector{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(m, nsSel) != nil {
				nsSel = nil
			}
		}
	}
	p := engine.Invalid(kind, ns, u.GetName(), u.GetGeneration(), policyv1alpha1.EnforcementMode(enforcement), targets, nsSel, reason)
	p.UID = u.GetUID()
	return p
}

func (s *Source) upsert(logger klog.Logger, obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	e := &entry{kind: u.GetKind(), namespace: u.GetNamespace(), name: u.GetName(), generation: u.GetGeneration()}
	if st, found, _ := unstructured.NestedMap(u.Object, "status"); found {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(st, &e.status)
	}
	p, errs := Compile(u)
	if errs != nil {
		e.invalid = errs.ToAggregate().Error()
		e.fallback = Fallback(u, e.invalid)
		logger.Error(errs.ToAggregate(), "A policy does not compile", "kind", u.GetKind(), "policy", klog.KObj(u), "rejectsWhatItTargets", e.fallback != nil)
	}
	e.policy = p
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[objectKey(e.kind, e.namespace, e.name)] = e
	s.publish()
}

func (s *Source) remove(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, objectKey(u.GetKind(), u.GetNamespace(), u.GetName()))
	s.publish()
}

// publish rebuilds the snapshot and signals the change; callers hold s.mu.
func (s *Source) publish() {
	snap := &snapshot{namespaced: map[string][]*engine.Policy{}}
	for _, e := range s.objects {
		p := e.policy
		if p == nil {
			p = e.fallback
		}
		switch {
		case p == nil:
		case p.Namespace == "":
			snap.cluster = append(snap.cluster, p)
		default:
			snap.namespaced[p.Namespace] = append(snap.namespaced[p.Namespace], p)
		}
	}
	engine.Sort(snap.cluster)
	for _, ps := range snap.namespaced {
		engine.Sort(ps)
	}
	s.current.Store(snap)
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// entries returns a copy of every entry.
func (s *Source) entries() []entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]entry, 0, len(s.objects))
	for _, e := range s.objects {
		out = append(out, *e)
	}
	return out
}

// NewSourceForTest returns a ready source without informers, for tests of
// code that reads policies; AddForTest loads them.
func NewSourceForTest() *Source {
	s := NewSource(nil, nil)
	s.absent.Store(true)
	return s
}

// AddForTest loads a compiled policy into a test source.
func (s *Source) AddForTest(p *engine.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[objectKey(p.Kind, p.Namespace, p.Name)] = &entry{policy: p}
	s.publish()
}
