// Package gangs makes ProvisioningRequests for gangs the scheduler could
// not place: a PodGroup (scheduling.k8s.io/v1beta1, gang scheduling) whose
// PodGroupInitiallyScheduled condition is False for Unschedulable gets one
// request of the configured class, for its pending members, whose booking
// the members use (the request's podGroup parameter). The request is
// deleted, and its booking released, once the group is placed or gone; a
// request that failed is left for people to read, and for the provisioner
// to delete after --delete-finished-requests-after, when the group gets a
// new one if it is still unschedulable.
//
// Everything read here is a tenant's (PodGroups, their members' specs), so
// what a group costs is bounded before anything is created: its pending
// members are read up to the provisioner's --max-pods-per-request (a
// request of more would fail TooManyPods), their specs give at most
// MaxPodSets pod sets, and a namespace holds at most MaxRequestsPerNamespace
// such requests. The request is an ordinary tenant request otherwise:
// quota, priority, admission and the booking limits apply as to one the
// tenant wrote.
package gangs

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

const (
	// LabelPodGroupUID is on the requests and PodTemplates made for a
	// PodGroup: its UID.
	LabelPodGroupUID = "autoscaling.gantry.dev/pod-group-uid"
	// MaxPodSets is the most pod sets a request has (the CRD's bound):
	// members of more distinct specs get no request.
	MaxPodSets = 32
	// DefaultMaxRequestsPerNamespace is Gangs.MaxRequestsPerNamespace's
	// default.
	DefaultMaxRequestsPerNamespace = 16
	// IndexPendingMember indexes pods not bound to a node by the PodGroup
	// their spec.schedulingGroup names: "<namespace>/<group>".
	IndexPendingMember = "gantry.gangs/pending-member"

	// Event reasons, on the PodGroup.
	ReasonRequestCreated  = "ProvisioningRequestCreated"
	ReasonRequestReleased = "ProvisioningRequestReleased"
	ReasonNoRequest       = "NoProvisioningRequest"
)

var requestsMade = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "gantry_provisioning_pod_group_requests_total",
	Help: "ProvisioningRequests for unschedulable PodGroups, by what happened: created, released (the group placed or gone), refused (a limit, a name taken, or a tenant's booking for the group; once per group and reason).",
}, []string{"result"})

func init() { metrics.Registry.MustRegister(requestsMade) }

// Gangs is the controller. It reads pods through PodInformer, which must
// carry PodIndexers.
type Gangs struct {
	Client client.Client
	// APIReader reads PodTemplates, which Client's cache holds the
	// metadata of only.
	APIReader   client.Reader
	PodInformer cache.SharedIndexInformer
	Recorder    record.EventRecorder
	// Class is the class of the requests made (check-capacity or an
	// atomic scale-up class).
	Class string
	// MaxPods bounds the members a request is made for (the provisioner's
	// --max-pods-per-request).
	MaxPods int
	// MaxRequestsPerNamespace bounds the requests made in one namespace
	// (0: DefaultMaxRequestsPerNamespace).
	MaxRequestsPerNamespace int

	mu sync.Mutex
	// refused is the last refusal of each PodGroup until the group is
	// placed or gone.
	refused map[types.NamespacedName]string
}

// PodIndexers are the indexers Gangs.PodInformer carries.
func PodIndexers() cache.Indexers {
	return cache.Indexers{IndexPendingMember: func(obj any) ([]string, error) {
		p, ok := obj.(*v1.Pod)
		if !ok || p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			return nil, nil
		}
		if g := schedv1alpha1.PodGroupOf(p); g != "" {
			return []string{p.Namespace + "/" + g}, nil
		}
		return nil, nil
	}}
}

// RequestName is the name of the request made for PodGroup group: a
// prefix and the group's name, or for a name too long a cut of it and a
// hash of the whole.
func RequestName(group string) string {
	name := "podgroup-" + group
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(group))
	return name[:validation.DNS1123SubdomainMaxLength-17] + "-" + hex.EncodeToString(sum[:8])
}

// SetupWithManager registers the controller: PodGroups, their requests,
// and the pods that name a PodGroup.
func (g *Gangs) SetupWithManager(mgr ctrl.Manager) error {
	if g.PodInformer == nil {
		return fmt.Errorf("gangs: no pod informer")
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("podgroup-requests").
		For(&schedulingv1beta1.PodGroup{}).
		Owns(&provv1.ProvisioningRequest{}).
		WatchesRawSource(&source.Informer{Informer: g.PodInformer, Handler: handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []reconcile.Request {
				if p, ok := o.(*v1.Pod); ok {
					if name := schedv1alpha1.PodGroupOf(p); name != "" {
						return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: name}}}
					}
				}
				return nil
			})}).
		Complete(g)
}

// Reconcile makes, keeps or releases the request of one PodGroup.
func (g *Gangs) Reconcile(ctx context.Context, key reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx).WithValues("podGroup", key.NamespacedName)
	pg := &schedulingv1beta1.PodGroup{}
	if err := g.Client.Get(ctx, key.NamespacedName, pg); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		// Gone: its request goes with it (the garbage collector would
		// delete it too, through its owner reference).
		g.forget(key.NamespacedName)
		return reconcile.Result{}, g.release(ctx, key.Namespace, key.Name, "", nil, "its PodGroup was deleted")
	}
	pr, err := g.request(ctx, pg)
	if err != nil {
		return reconcile.Result{}, err
	}
	c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
	switch {
	case pg.DeletionTimestamp != nil:
		g.forget(key.NamespacedName)
		return reconcile.Result{}, g.release(ctx, pg.Namespace, pg.Name, pg.UID, pg, "its PodGroup is being deleted")
	case c != nil && c.Status == metav1.ConditionTrue:
		g.forget(key.NamespacedName)
		if pr == nil {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, g.release(ctx, pg.Namespace, pg.Name, pg.UID, pg, "its PodGroup was placed")
	case pr != nil:
		// Being served, or ended: a Failed request stays until the
		// provisioner deletes it (--delete-finished-requests-after).
		if !ours(pr, pg.UID) && c != nil && c.Status == metav1.ConditionFalse {
			g.refuse(pg, "ProvisioningRequest %s exists and was not made for this PodGroup", pr.Name)
		}
		return reconcile.Result{}, nil
	case pg.Spec.SchedulingPolicy.Gang == nil || c == nil || c.Status != metav1.ConditionFalse ||
		c.Reason != schedulingv1beta1.PodGroupReasonUnschedulable:
		return reconcile.Result{}, nil
	}
	logger.V(2).Info("Making a ProvisioningRequest for an unschedulable PodGroup")
	return reconcile.Result{}, g.create(ctx, pg)
}

// request is the request made for pg, nil for none. One of the same name
// made for another group (of an earlier incarnation, or by the tenant) is
// not pg's: it is left alone, and pg gets none while it is there.
func (g *Gangs) request(ctx context.Context, pg *schedulingv1beta1.PodGroup) (*provv1.ProvisioningRequest, error) {
	pr := &provv1.ProvisioningRequest{}
	err := g.Client.Get(ctx, types.NamespacedName{Namespace: pg.Namespace, Name: RequestName(pg.Name)}, pr)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return pr, nil
}

// ours reports whether pr was made for the PodGroup of uid ("" for any).
func ours(pr *provv1.ProvisioningRequest, uid types.UID) bool {
	v, ok := pr.Labels[LabelPodGroupUID]
	return ok && (uid == "" || v == string(uid))
}

// create makes pg's request: one pod set per distinct spec among its
// pending members, each from a PodTemplate made for it.
func (g *Gangs) create(ctx context.Context, pg *schedulingv1beta1.PodGroup) error {
	limit := cmp.Or(g.MaxPods, provisioning.DefaultMaxPodsPerRequest)
	objs, err := g.PodInformer.GetIndexer().ByIndex(IndexPendingMember, pg.Namespace+"/"+pg.Name)
	if err != nil {
		return err
	}
	if len(objs) > limit {
		g.refuse(pg,
			"%d pending members, more than the %d pods a ProvisioningRequest may ask for (--max-pods-per-request)", len(objs), limit)
		return nil
	}
	if minCount := pg.Spec.SchedulingPolicy.Gang.MinCount; int32(len(objs)) < minCount {
		// The rest of the gang is still being created: its pods wake
		// the group.
		return nil
	}
	sets, err := podSets(objs)
	if err != nil {
		g.refuse(pg, "%s", err.Error())
		return nil
	}
	var all provv1.ProvisioningRequestList
	if err := g.Client.List(ctx, &all, client.InNamespace(pg.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	mine := 0
	for i := range all.Items {
		pr := &all.Items[i]
		switch {
		case ours(pr, ""):
			mine++
		case provisioning.RequestPodGroup(pr) == pg.Name:
			// The tenant books for the group already: a request of ours
			// would hold the same room twice.
			g.refuse(pg, "ProvisioningRequest %s books for this PodGroup already", pr.Name)
			return nil
		}
	}
	if max := cmp.Or(g.MaxRequestsPerNamespace, DefaultMaxRequestsPerNamespace); mine >= max {
		g.refuse(pg,
			"the namespace holds %d ProvisioningRequests made for PodGroups, the most it may (--max-pod-group-requests-per-namespace)", mine)
		return nil
	}

	name := RequestName(pg.Name)
	pr := &provv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pg.Namespace, Name: name,
			Labels: map[string]string{LabelPodGroupUID: string(pg.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: schedulingv1beta1.SchemeGroupVersion.String(), Kind: "PodGroup",
				Name: pg.Name, UID: pg.UID, Controller: ptr.To(true)}},
		},
		Spec: provv1.ProvisioningRequestSpec{
			ProvisioningClassName: g.Class,
			Parameters:            map[string]provv1.Parameter{provisioning.ParameterPodGroup: provv1.Parameter(pg.Name)},
		},
	}
	for i, s := range sets {
		pr.Spec.PodSets = append(pr.Spec.PodSets, provv1.PodSet{
			PodTemplateRef: provv1.Reference{Name: templateName(name, i)}, Count: s.count})
	}
	// The templates first, so that the request finds them: owned by the
	// group (the garbage collector deletes them with it), deleted with the
	// request when it is released. A template left by an earlier request
	// of the group (deleted after it ended) is brought up to date.
	owner := metav1.OwnerReference{APIVersion: schedulingv1beta1.SchemeGroupVersion.String(), Kind: "PodGroup", Name: pg.Name, UID: pg.UID}
	for i, s := range sets {
		pt := &v1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: pg.Namespace, Name: templateName(name, i),
				Labels:          map[string]string{LabelPodGroupUID: string(pg.UID)},
				OwnerReferences: []metav1.OwnerReference{owner},
			},
			Template: s.template,
		}
		err := g.Client.Create(ctx, pt)
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return err
			}
			continue
		}
		old := &v1.PodTemplate{}
		if err := g.APIReader.Get(ctx, client.ObjectKeyFromObject(pt), old); err != nil {
			return err
		}
		if old.Labels[LabelPodGroupUID] != string(pg.UID) {
			g.refuse(pg, "PodTemplate %s exists and was not made for this PodGroup", pt.Name)
			return nil
		}
		old.Template = s.template
		if err := g.Client.Update(ctx, old); err != nil {
			return err
		}
	}
	if err := g.Client.Create(ctx, pr); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	requestsMade.WithLabelValues("created").Inc()
	g.Recorder.Eventf(pg, v1.EventTypeNormal, ReasonRequestCreated, "ProvisioningRequest %s (class %s) for %d pending members in %d pod sets",
		name, g.Class, len(objs), len(sets))
	return nil
}

// release deletes the request made for the PodGroup name of uid ("" for
// any) and its templates; pg, if not nil, gets the event.
func (g *Gangs) release(ctx context.Context, namespace, name string, uid types.UID, pg *schedulingv1beta1.PodGroup, why string) error {
	pr := &provv1.ProvisioningRequest{}
	if err := g.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: RequestName(name)}, pr); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ours(pr, uid) {
		return nil
	}
	for i := range pr.Spec.PodSets {
		pt := &v1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: pr.Spec.PodSets[i].PodTemplateRef.Name}}
		if err := g.Client.Delete(ctx, pt); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	if err := g.Client.Delete(ctx, pr, client.Preconditions{UID: &pr.UID}); client.IgnoreNotFound(err) != nil {
		return err
	}
	requestsMade.WithLabelValues("released").Inc()
	if pg != nil {
		g.Recorder.Eventf(pg, v1.EventTypeNormal, ReasonRequestReleased, "ProvisioningRequest %s deleted: %s", pr.Name, why)
	}
	return nil
}

// refuse says why pg gets no request.
func (g *Gangs) refuse(pg *schedulingv1beta1.PodGroup, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	key := types.NamespacedName{Namespace: pg.Namespace, Name: pg.Name}
	g.mu.Lock()
	if g.refused == nil {
		g.refused = map[types.NamespacedName]string{}
	}
	prev, seen := g.refused[key]
	g.refused[key] = msg
	g.mu.Unlock()
	again := seen && prev == msg
	if !again {
		// Counted once per group and reason, not per reconcile (every
		// member's change wakes the group); the recorder aggregates the
		// repeated events.
		requestsMade.WithLabelValues("refused").Inc()
	}
	g.Recorder.Event(pg, v1.EventTypeWarning, ReasonNoRequest, msg)
}

// forget drops what refuse remembers of the group of key.
func (g *Gangs) forget(key types.NamespacedName) {
	g.mu.Lock()
	delete(g.refused, key)
	g.mu.Unlock()
}

func templateName(request string, i int) string {
	suffix := "-" + strconv.Itoa(i)
	if len(request)+len(suffix) > validation.DNS1123SubdomainMaxLength {
		request = request[:validation.DNS1123SubdomainMaxLength-len(suffix)]
	}
	return request + suffix
}

type podSet struct {
	template v1.PodTemplateSpec
	count    int32
}

// podSets groups pods by what scheduling reads of them: the template of a
// pod set is a member's spec and labels, without its node, its group, its
// host name and the service account token volume admission gave it.
func podSets(objs []any) ([]podSet, error) {
	byKey := map[string]int{}
	var sets []podSet
	// In name order, so that a group's sets come out the same each time.
	pods := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*v1.Pod); ok {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b *v1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range pods {
		t := v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(p.Labels)}, Spec: *p.Spec.DeepCopy()}
		t.Spec.NodeName, t.Spec.SchedulingGroup, t.Spec.Hostname, t.Spec.Subdomain = "", nil, "", ""
		t.Spec.SchedulingGates = nil
		dropTokenVolume(&t.Spec)
		b, err := t.Marshal()
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		key := string(sum[:])
		if i, ok := byKey[key]; ok {
			sets[i].count++
			continue
		}
		if len(sets) == MaxPodSets {
			return nil, fmt.Errorf("the pending members have more than %d distinct specs, the most pod sets a ProvisioningRequest has", MaxPodSets)
		}
		byKey[key] = len(sets)
		sets = append(sets, podSet{template: t, count: 1})
	}
	return sets, nil
}

// tokenVolumePrefix begins the name of the projected volume of the service
// account token that kube-apiserver's ServiceAccount admission adds to
// every pod, a random suffix after it.
const tokenVolumePrefix = "kube-api-access-"

// dropTokenVolume removes from spec the service account token volume
// admission added, and its mounts: its name differs from pod to pod, so
// members of one spec would otherwise each be a pod set of their own, and
// the pods made from the template get one of their own anyway.
func dropTokenVolume(spec *v1.PodSpec) {
	var dropped []string
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v v1.Volume) bool {
		if v.Projected != nil && strings.HasPrefix(v.Name, tokenVolumePrefix) {
			dropped = append(dropped, v.Name)
			return true
		}
		return false
	})
	if len(dropped) == 0 {
		return
	}
	for _, cs := range [][]v1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].VolumeMounts = slices.DeleteFunc(cs[i].VolumeMounts, func(m v1.VolumeMount) bool { return slices.Contains(dropped, m.Name) })
		}
	}
}
