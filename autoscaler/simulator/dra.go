package simulator

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/utils/ptr"
)

// MaxClaimsPerPod is the most entries of spec.resourceClaims a simulated
// pod may have. The API sets no bound; Gantry takes the one it sets on the
// devices of one claim (AllocationResultsMaxSize, 32): a pod with more
// claims is no workload the provisioner expects, and each template claim
// is made anew for every simulated pod.
const MaxClaimsPerPod = resourceapi.AllocationResultsMaxSize

// claimsOnly is the DynamicResources plugin for pods with resource claims:
// for a pod without, its PreFilter skips at once, as the plugin's would
// after some work (the simulation maps no extended resource to devices),
// so such pods cost nothing more than without the plugin.
type claimsOnly struct {
	*dynamicresources.DynamicResources
}

// skip is the status of every claimsOnly PreFilter that skips: the
// framework only reads a Skip status.
var skip = fwk.NewStatus(fwk.Skip)

func (p *claimsOnly) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil, skip
	}
	return p.DynamicResources.PreFilter(ctx, state, pod, nodes)
}

// draSyncTimeout bounds how long a simulation waits for the resource.k8s.io
// informers when it first needs them; the provisioner retries a simulation
// that fails for it.
const draSyncTimeout = 30 * time.Second

// draInformers are the cluster's DRA objects, read through informers of the
// shared factory that start when a simulation first has a pod with
// resource claims: a provisioner in a cluster that never uses DRA never
// lists them (nor needs the rights to).
type draInformers struct {
	factory informers.SharedInformerFactory
	// ctx is the lifetime of the informers: New's.
	ctx context.Context

	mu        sync.Mutex
	synced    []cache.InformerSynced
	classes   resourcelisters.DeviceClassLister
	slices    resourcelisters.ResourceSliceLister
	claims    resourcelisters.ResourceClaimLister
	templates resourcelisters.ResourceClaimTemplateLister
}

// start starts the informers once and waits, at most draSyncTimeout, for
// them to sync.
func (d *draInformers) start(ctx context.Context) error {
	d.mu.Lock()
	if d.synced == nil {
		r := d.factory.Resource().V1()
		d.classes, d.slices = r.DeviceClasses().Lister(), r.ResourceSlices().Lister()
		d.claims, d.templates = r.ResourceClaims().Lister(), r.ResourceClaimTemplates().Lister()
		d.synced = []cache.InformerSynced{r.DeviceClasses().Informer().HasSynced, r.ResourceSlices().Informer().HasSynced,
			r.ResourceClaims().Informer().HasSynced, r.ResourceClaimTemplates().Informer().HasSynced}
		d.factory.StartWithContext(d.ctx)
	}
	synced := d.synced
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, draSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("the resource.k8s.io informers (deviceclasses, resourceslices, resourceclaims, resourceclaimtemplates) "+
			"have not synced within %s: is resource.k8s.io/v1 served, and may the provisioner list and watch them?", draSyncTimeout)
	}
	return nil
}

// draManager is the framework's SharedDRAManager. DeviceClasses are the
// cluster's; ResourceSlices and ResourceClaims are those of the running
// simulation (begin), none between simulations.
type draManager struct {
	informers *draInformers
	// consumable is the DRAConsumableCapacity gate, as the plugin read it.
	consumable bool

	// The running simulation's.
	classes resourcelisters.DeviceClassLister
	slices  sliceList
	claims  *claimTracker
}

var _ fwk.SharedDRAManager = &draManager{}

// newDRAManager is the DRA state of one framework instance; the instances
// share the informers.
func newDRAManager(shared *draInformers, consumable bool) *draManager {
	m := &draManager{informers: shared, consumable: consumable}
	m.end()
	return m
}

// begin sets up the DRA state of one simulation: the cluster's slices,
// with extra (those of nodes a scale-up would add), and its claims, whose
// allocated devices are taken. The informers must have been started.
// Neither list is copied: slices and claims of the informers are only read.
func (m *draManager) begin(extra []*resourceapi.ResourceSlice) error {
	m.classes = m.informers.classes
	slices, err := m.informers.slices.List(labels.Everything())
	if err != nil {
		return err
	}
	m.slices = append(slices, extra...)
	claims, err := m.informers.claims.List(labels.Everything())
	if err != nil {
		return err
	}
	m.claims = newClaimTracker(m.informers.claims, m.consumable)
	for _, c := range claims {
		m.claims.take(c)
	}
	return nil
}

// end drops the simulation's state.
func (m *draManager) end() {
	m.classes, m.slices = nil, nil
	m.claims = newClaimTracker(nil, m.consumable)
}

func (m *draManager) ResourceClaims() fwk.ResourceClaimTracker { return m.claims }
func (m *draManager) ResourceSlices() fwk.ResourceSliceLister  { return m.slices }
func (m *draManager) DeviceClasses() fwk.DeviceClassLister     { return classLister{m.classes} }

// DeviceClassResolver maps no extended resource to a DeviceClass: extended
// resources backed by DRA (DRAExtendedResource) are not simulated, a pod
// requesting one fits only nodes that advertise it, as without DRA.
func (m *draManager) DeviceClassResolver() fwk.DeviceClassResolver { return noResolver{} }

// sliceList is the simulation's ResourceSlices. DeviceTaintRules
// (DRADeviceTaintRules, an off-by-default beta API) are not applied; taints
// in the slices are.
type sliceList []*resourceapi.ResourceSlice

func (l sliceList) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) { return l, nil }

// classLister serves the cluster's DeviceClasses during a simulation with
// claims, none otherwise.
type classLister struct {
	l resourcelisters.DeviceClassLister
}

func (c classLister) List() ([]*resourceapi.DeviceClass, error) {
	if c.l == nil {
		return nil, nil
	}
	return c.l.List(labels.Everything())
}

func (c classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c.l == nil {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return c.l.Get(name)
}

type noResolver struct{}

func (noResolver) GetDeviceClass(v1.ResourceName) *resourceapi.DeviceClass { return nil }

// claimTracker is the ResourceClaims of one simulation: the cluster's
// (through the lister), shadowed by the claims the simulation made or
// allocated. An allocation the plugin reserves for a placed pod is final
// at once, since nothing binds: the next pod sees the claim allocated and
// its devices taken.
type claimTracker struct {
	lister     resourcelisters.ResourceClaimLister
	consumable bool
	own        map[claimKey]*resourceapi.ResourceClaim
	// allocated are the devices of every allocated claim. The plugin reads
	// it in PreFilter and Filter; it changes only in Reserve, between two
	// pods, so it is handed out without a copy.
	allocated structured.AllocatedState
}

var _ fwk.ResourceClaimTracker = &claimTracker{}

type claimKey struct{ namespace, name string }

func newClaimTracker(lister resourcelisters.ResourceClaimLister, consumable bool) *claimTracker {
	return &claimTracker{lister: lister, consumable: consumable, own: map[claimKey]*resourceapi.ResourceClaim{},
		allocated: structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection()}}
}

// add makes claim one of the simulation's.
func (t *claimTracker) add(claim *resourceapi.ResourceClaim) {
	t.own[claimKey{claim.Namespace, claim.Name}] = claim
}

// take marks the devices allocated to claim as in use, as the scheduler's
// tracker does: a device with admin access is not taken, a shared one
// (DRAConsumableCapacity) takes its share and capacity, or, without the
// gate, the device.
func (t *claimTracker) take(claim *resourceapi.ResourceClaim) {
	if claim.Status.Allocation == nil {
		return
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if t.consumable && r.ShareID != nil {
			t.allocated.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			if r.ConsumedCapacity != nil {
				t.allocated.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
			continue
		}
		t.allocated.AllocatedDevices.Insert(id)
	}
}

func (t *claimTracker) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	if c, ok := t.own[claimKey{namespace, name}]; ok {
		return c, nil
	}
	if t.lister == nil {
		return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
	}
	return t.lister.ResourceClaims(namespace).Get(name)
}

func (t *claimTracker) List() ([]*resourceapi.ResourceClaim, error) {
	var out []*resourceapi.ResourceClaim
	if t.lister != nil {
		all, err := t.lister.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, c := range all {
			if _, shadowed := t.own[claimKey{c.Namespace, c.Name}]; !shadowed {
				out = append(out, c)
			}
		}
	}
	for _, c := range t.own {
		out = append(out, c)
	}
	return out, nil
}

func (t *claimTracker) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	return t.allocated.AllocatedDevices, nil
}

func (t *claimTracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	s := t.allocated
	return &s, nil
}

// SignalClaimPendingAllocation records the allocation the plugin's Reserve
// made for a placed pod.
func (t *claimTracker) SignalClaimPendingAllocation(uid types.UID, allocated *resourceapi.ResourceClaim) error {
	if allocated == nil || allocated.Status.Allocation == nil {
		return fmt.Errorf("claim %s has no allocation to record", uid)
	}
	key := claimKey{allocated.Namespace, allocated.Name}
	if prev, err := t.Get(key.namespace, key.name); err == nil && prev.Status.Allocation != nil {
		// Already allocated (and taken): a second pod shares it.
		return nil
	}
	t.own[key] = allocated
	t.take(allocated)
	return nil
}

// GetPendingAllocation is always nil: an allocation is final when it is
// signalled.
func (t *claimTracker) GetPendingAllocation(types.UID) *resourceapi.AllocationResult { return nil }

func (t *claimTracker) MaybeRemoveClaimPendingAllocation(types.UID, bool) bool { return false }

func (t *claimTracker) AssumeClaimAfterAPICall(claim *resourceapi.ResourceClaim) error {
	return fmt.Errorf("claim %s/%s: the simulation makes no API calls", claim.Namespace, claim.Name)
}

func (t *claimTracker) AssumedClaimRestore(string, string) {}

// podClaims are what the pods of one set need for their spec.resourceClaims:
// per entry, the template a claim is made from, or nil for an entry naming
// an existing claim.
type podClaims []*resourceapi.ResourceClaimTemplate

// InvalidPodSet is the simulation's answer when a pod set cannot be
// simulated as it stands: it names a ResourceClaimTemplate or ResourceClaim
// that does not exist, or has more claims than MaxClaimsPerPod. The pod set
// needs changing (or the object creating); no capacity makes it fit.
type InvalidPodSet struct {
	PodSet string
	Reason string
}

func (e *InvalidPodSet) Error() string { return fmt.Sprintf("pod set %s: %s", e.PodSet, e.Reason) }

// resolveClaims checks the spec.resourceClaims of set's pod against the
// cluster's objects and returns the templates its pods' claims are made
// from.
func (m *draManager) resolveClaims(set PodSet) (podClaims, error) {
	pod := set.Pod
	if n := len(pod.Spec.ResourceClaims); n > MaxClaimsPerPod {
		return nil, &InvalidPodSet{PodSet: set.Name, Reason: fmt.Sprintf(
			"the pods have %d resource claims; the provisioner simulates at most %d per pod", n, MaxClaimsPerPod)}
	}
	out := make(podClaims, len(pod.Spec.ResourceClaims))
	for i, pc := range pod.Spec.ResourceClaims {
		field := fmt.Sprintf("spec.resourceClaims[%d] (%s)", i, pc.Name)
		switch {
		case pc.ResourceClaimTemplateName != nil:
			t, err := m.informers.templates.ResourceClaimTemplates(pod.Namespace).Get(*pc.ResourceClaimTemplateName)
			if apierrors.IsNotFound(err) {
				return nil, &InvalidPodSet{PodSet: set.Name, Reason: fmt.Sprintf(
					"%s: ResourceClaimTemplate %s/%s not found", field, pod.Namespace, *pc.ResourceClaimTemplateName)}
			}
			if err != nil {
				return nil, err
			}
			out[i] = t
		case pc.ResourceClaimName != nil:
			if _, err := m.claims.Get(pod.Namespace, *pc.ResourceClaimName); apierrors.IsNotFound(err) {
				return nil, &InvalidPodSet{PodSet: set.Name, Reason: fmt.Sprintf(
					"%s: ResourceClaim %s/%s not found", field, pod.Namespace, *pc.ResourceClaimName)}
			} else if err != nil {
				return nil, err
			}
		default:
			return nil, &InvalidPodSet{PodSet: set.Name, Reason: field + ": names neither resourceClaimName nor resourceClaimTemplateName"}
		}
	}
	return out, nil
}

// makeClaims gives pod (a simulated copy, named and with its UID) a claim
// from each template of pc, as the resourceclaim controller would: owned by
// the pod and named in its status.resourceClaimStatuses. A generated name
// holds a ':', which no object's name may, so it never shadows a claim of
// the cluster.
func (m *draManager) makeClaims(pod *v1.Pod, pc podClaims) {
	pod.Status.ResourceClaimStatuses = make([]v1.PodResourceClaimStatus, 0, len(pc))
	for i, t := range pc {
		if t == nil {
			continue
		}
		name := pod.Spec.ResourceClaims[i].Name
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: pod.Namespace, Name: pod.Name + ":" + name, UID: pod.UID + types.UID(":"+name),
				Labels: t.Spec.Labels, Annotations: t.Spec.Annotations,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			},
			// Shared with the template (the informer's object): the plugin
			// and the allocator only read a claim's spec.
			Spec: t.Spec.Spec,
		}
		m.claims.add(claim)
		pod.Status.ResourceClaimStatuses = append(pod.Status.ResourceClaimStatuses,
			v1.PodResourceClaimStatus{Name: name, ResourceClaimName: &claim.Name})
	}
}
