package metadatapolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	"github.com/gantry-dev/gantry/admission/metrics"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// PluginName is the plugin's name for --enable-admission-plugins.
const PluginName = "MetadataPolicy"

// Audit annotation keys (in the API server's audit log).
const (
	AuditAnnotationAudit     = "metadatapolicy.gantry.dev/audit"
	AuditAnnotationConflicts = "metadatapolicy.gantry.dev/conflicts"
	AuditAnnotationIgnored   = "metadatapolicy.gantry.dev/ignored"
)

// Plugin applies MetadataPolicies in kube-apiserver, and validates the
// policies themselves as they are written.
type Plugin struct {
	*admission.Handler
	client     kubernetes.Interface
	dynamic    dynamic.Interface
	namespaces corev1listers.NamespaceLister
	drained    <-chan struct{}
	source     *Source
	recorder   record.EventRecorder
}

var (
	_ admission.MutationInterface                  = &Plugin{}
	_ admission.ValidationInterface                = &Plugin{}
	_ initializer.WantsExternalKubeClientSet       = &Plugin{}
	_ initializer.WantsExternalKubeInformerFactory = &Plugin{}
	_ initializer.WantsDynamicClient               = &Plugin{}
	_ initializer.WantsDrainedNotification         = &Plugin{}
)

// New returns the plugin; the API server's initializers complete it.
func New(io.Reader) (admission.Interface, error) {
	metrics.Register()
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}, nil
}

// SetExternalKubeClientSet implements initializer.WantsExternalKubeClientSet.
func (p *Plugin) SetExternalKubeClientSet(c kubernetes.Interface) { p.client = c }

// SetExternalKubeInformerFactory implements initializer.WantsExternalKubeInformerFactory.
func (p *Plugin) SetExternalKubeInformerFactory(f informers.SharedInformerFactory) {
	p.namespaces = f.Core().V1().Namespaces().Lister()
}

// SetDynamicClient implements initializer.WantsDynamicClient.
func (p *Plugin) SetDynamicClient(d dynamic.Interface) { p.dynamic = d }

// SetDrainedNotification implements initializer.WantsDrainedNotification.
func (p *Plugin) SetDrainedNotification(ch <-chan struct{}) { p.drained = ch }

// ValidateInitialization checks the plugin got what it needs and starts
// watching policies. Until they are known the plugin is not ready, and
// requests wait (bounded) rather than being admitted unchecked.
func (p *Plugin) ValidateInitialization() error {
	switch {
	case p.client == nil:
		return errors.New("MetadataPolicy: missing client")
	case p.dynamic == nil:
		return errors.New("MetadataPolicy: missing dynamic client")
	case p.namespaces == nil:
		return errors.New("MetadataPolicy: missing namespace lister")
	case p.drained == nil:
		return errors.New("MetadataPolicy: missing drained notification")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-p.drained
		cancel()
	}()
	p.source = NewSource(p.dynamic, p.client.Discovery())
	p.SetReadyFunc(p.source.Ready)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.client.CoreV1().Events("")})
	p.recorder = broadcaster.NewRecorder(nil, corev1.EventSource{Component: "metadatapolicy-admission"})
	logCtx := klog.NewContext(ctx, klog.Background().WithName(PluginName))
	go p.source.Run(logCtx)
	go p.source.RunStatus(logCtx, p.cachedNamespaceLabels)
	return nil
}

func (p *Plugin) cachedNamespaceLabels(name string) (map[string]string, bool) {
	ns, err := p.namespaces.Get(name)
	if err != nil {
		return nil, false
	}
	return ns.Labels, true
}

func isPolicyResource(a admission.Attributes) bool {
	return a.GetResource().Group == policyv1alpha1.GroupName
}

// Admit applies the policies that select the object.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" || isPolicyResource(a) || a.GetNamespace() == "" {
		return nil
	}
	start := time.Now()
	defer metrics.Observe(PluginName, metrics.InProcess, start)
	if !p.WaitForReady() {
		metrics.Decisions.WithLabelValues(metrics.ResultError, metrics.InProcess).Inc()
		return admission.NewForbidden(a, errors.New("MetadataPolicy is not yet ready to handle requests: policies are still being loaded"))
	}
	policies := p.source.Policies(a.GetNamespace())
	if len(policies) == 0 {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("MetadataPolicy: object has no metadata: %v", err))
	}
	gr := a.GetResource().GroupResource()
	eobj := &engine.Object{
		Operation:   policyv1alpha1.Operation(a.GetOperation()),
		Resource:    policyv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource},
		Namespace:   a.GetNamespace(),
		Labels:      obj.GetLabels(),
		Annotations: obj.GetAnnotations(),
		Pod:         gr == api.Resource("pods"),
	}
	if needsNamespaceLabels(policies) {
		if eobj.NamespaceLabels, err = p.namespaceLabels(ctx, a.GetNamespace()); err != nil {
			metrics.Decisions.WithLabelValues(metrics.ResultError, metrics.InProcess).Inc()
			return admission.NewForbidden(a, fmt.Errorf("MetadataPolicy: reading namespace %s: %w", a.GetNamespace(), err))
		}
	}
	d := engine.Evaluate(policies, eobj)
	p.report(a, d)
	if d.Enforced.Rejected() {
		metrics.Decisions.WithLabelValues(metrics.ResultRejected, metrics.InProcess).Inc()
		return admission.NewForbidden(a, errors.New(d.Enforced.RejectionMessage()))
	}
	newLabels, newAnnotations, scheduler := d.Enforced.Changes(eobj)
	if len(newLabels) == 0 && len(newAnnotations) == 0 && scheduler == "" {
		metrics.Decisions.WithLabelValues(metrics.ResultAdmitted, metrics.InProcess).Inc()
		return nil
	}
	obj.SetLabels(merge(obj.GetLabels(), newLabels))
	obj.SetAnnotations(merge(obj.GetAnnotations(), newAnnotations))
	if scheduler != "" {
		if err := setSchedulerName(a.GetObject(), scheduler); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
	}
	metrics.Decisions.WithLabelValues(metrics.ResultMutated, metrics.InProcess).Inc()
	return nil
}

// report writes audit annotations for audit findings, conflicts and ignored
// writes, and records an event on each matching Audit policy.
func (p *Plugin) report(a admission.Attributes, d *engine.Decision) {
	if len(d.Audited.Matched) > 0 {
		summary := d.Audited.Summary()
		_ = a.AddAnnotation(AuditAnnotationAudit, summary)
		metrics.Decisions.WithLabelValues(metrics.ResultAudited, metrics.InProcess).Inc()
		what := fmt.Sprintf("%s %s/%s (%s)", a.GetKind().Kind, a.GetNamespace(), a.GetName(), strings.ToLower(string(a.GetOperation())))
		seen := map[*engine.Policy]bool{}
		for _, m := range d.Audited.Matched {
			if seen[m.Policy] {
				continue
			}
			seen[m.Policy] = true
			reason := "AuditWouldMutate"
			if d.Audited.Rejected() {
				reason = "AuditWouldReject"
			}
			p.recorder.Eventf(policyRef(m.Policy), corev1.EventTypeNormal, reason, "%s: %s", what, summary)
		}
	}
	if len(d.Enforced.Conflicts) > 0 {
		parts := make([]string, 0, len(d.Enforced.Conflicts))
		for _, c := range d.Enforced.Conflicts {
			parts = append(parts, c.String())
		}
		_ = a.AddAnnotation(AuditAnnotationConflicts, strings.Join(parts, "; "))
		metrics.Decisions.WithLabelValues(metrics.ResultConflict, metrics.InProcess).Inc()
	}
	if len(d.Enforced.Ignored) > 0 {
		_ = a.AddAnnotation(AuditAnnotationIgnored, strings.Join(d.Enforced.Ignored, "; "))
	}
}

func policyRef(p *engine.Policy) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: policyv1alpha1.SchemeGroupVersion.String(), Kind: p.Kind,
		Namespace: p.Namespace, Name: p.Name, UID: p.UID,
	}
}

// Validate rejects policies that do not compile, naming the fields.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !isPolicyResource(a) || a.GetSubresource() != "" {
		return nil
	}
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	if _, errs := Compile(u); errs != nil {
		return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), errs)
	}
	return nil
}

func needsNamespaceLabels(ps []*engine.Policy) bool {
	for _, p := range ps {
		if p.HasNamespaceSelector() {
			return true
		}
	}
	return false
}

// namespaceLabels reads a namespace's labels from the informer, falling back
// to the API for a namespace created a moment ago.
func (p *Plugin) namespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	ns, err := p.namespaces.Get(name)
	if apierrors.IsNotFound(err) {
		var live *corev1.Namespace
		if live, err = p.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err == nil {
			return live.Labels, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return ns.Labels, nil
}

func merge(into, from map[string]string) map[string]string {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = make(map[string]string, len(from))
	}
	for k, v := range from {
		into[k] = v
	}
	return into
}

func setSchedulerName(obj any, name string) error {
	switch pod := obj.(type) {
	case *api.Pod:
		pod.Spec.SchedulerName = name
	case *corev1.Pod:
		pod.Spec.SchedulerName = name
	default:
		return fmt.Errorf("MetadataPolicy: cannot set the scheduler of a %T", obj)
	}
	return nil
}
