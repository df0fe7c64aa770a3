//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// The comparison behind TestSimulationAgreesWithScheduler and its narrower
// cases. Node by node, the capacity the provisioner's simulation starts
// from as free (Reconciler.SimulatedCluster: the node's allocatable less
// the requests of the pods it puts there, Reservations among them) is held
// up against what Gantry's scheduler grants there. Probes ask the
// scheduler: pods pinned to one node by a required affinity to its
// hostname (spec.nodeName would bypass the scheduler). One asking for the
// simulated free CPU and memory must be bound; one asking for a millicore
// more, and one asking for a byte of memory more, must be Unschedulable.
// The provisioner's simulator (with Gantry's profile) is asked the same of
// every probe, on the same snapshot. Every pod and booking the tests make
// has priority 0: a probe can preempt nothing, it only reads what is free.

// labelProbe marks the probes.
const labelProbe = "agreement.gantry.dev/probe"

// settleQuiet is how long the bookings and pods of a test must stay
// unchanged, once the status controller's writes agree with the pods,
// before the state counts as settled.
const settleQuiet = 500 * time.Millisecond

// agreement is the simulation's side of the comparison: the provisioner's
// simulator and a client to read what the simulation starts from; and the
// scheduler, whose cache a disagreement shows.
type agreement struct {
	e      *env
	sched  *schedtest.Scheduler
	client client.Client
	sim    *simulator.Simulator
}

// newAgreement builds the simulator of a provisioner configured with
// Gantry's profile, as a cluster running Gantry's scheduler deploys it.
// The provisioner's controller is not run: it would serve the requests the
// tests make bookings for by hand.
func newAgreement(e *env, sched *schedtest.Scheduler) *agreement {
	e.t.Helper()
	c, err := client.New(e.Config, client.Options{Scheme: app.Scheme()})
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(e.Dir, "provisioner-scheduler.yaml")
	config := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: " +
		v1.DefaultSchedulerName + "\n" + schedtest.GantryProfile
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		e.t.Fatal(err)
	}
	profile, err := app.Profile(path, v1.DefaultSchedulerName)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	sim, err := simulator.New(ctx, profile, e.Client, informers.NewSharedInformerFactory(e.Client, 0))
	if err != nil {
		e.t.Fatal(err)
	}
	return &agreement{e: e, sched: sched, client: c, sim: sim}
}

// snapshot is the cluster at one moment as the simulation starts from it,
// with the API objects that explain it.
type snapshot struct {
	cluster      simulator.Cluster
	reservations []schedv1alpha1.Reservation
	pods         []v1.Pod
}

// snapshot reads the cluster as the provisioner's Reconciler does, through
// informers (with the provisioner's pod indexers) started for the reading,
// so that they hold everything written before.
func (a *agreement) snapshot(ctx context.Context) *snapshot {
	t := a.e.t
	t.Helper()
	factory := informers.NewSharedInformerFactory(a.e.Client, 0)
	pods := factory.Core().V1().Pods()
	if err := pods.Informer().AddIndexers(provisioning.PodIndexers()); err != nil {
		t.Fatal(err)
	}
	nodes := factory.Core().V1().Nodes()
	nodes.Informer()
	ictx, cancel := context.WithCancel(ctx)
	defer factory.Shutdown()
	defer cancel()
	factory.Start(ictx.Done())
	for typ, ok := range factory.WaitForCacheSync(ictx.Done()) {
		if !ok {
			t.Fatalf("informer of %v did not sync", typ)
		}
	}
	r := &provisioning.Reconciler{Client: a.client, Nodes: nodes.Lister(), Pods: pods.Lister(), PodInformer: pods.Informer()}
	cluster, err := r.SimulatedCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := a.e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := a.e.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &snapshot{cluster: cluster, reservations: rs.Items, pods: ps.Items}
}

// nodeFree is a node's capacity as the simulation sees it: allocatable,
// and what is left of it (negative when its pods ask for more).
type nodeFree struct {
	node               string
	allocCPU, allocMem int64 // millicores, bytes
	cpu, mem           int64
	// pods are the simulation's pods on the node, Reservations among them.
	pods []*v1.Pod
}

func (s *snapshot) free(node string) (nodeFree, bool) {
	f := nodeFree{node: node}
	found := false
	for _, n := range s.cluster.Nodes {
		if n.Name == node {
			found = true
			f.allocCPU = n.Status.Allocatable.Cpu().MilliValue()
			f.allocMem = n.Status.Allocatable.Memory().Value()
		}
	}
	if !found {
		return f, false
	}
	f.cpu, f.mem = f.allocCPU, f.allocMem
	for _, p := range s.cluster.Pods {
		if p.Spec.NodeName != node {
			continue
		}
		req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		f.cpu -= req.Cpu().MilliValue()
		f.mem -= req.Memory().Value()
		f.pods = append(f.pods, p)
	}
	return f, true
}

const (
	probeOverCPU    = "over-cpu"
	probeOverMemory = "over-memory"
	probeExact      = "exact"
)

// probe is one question to the simulator and the scheduler: does a pod of
// cpu and mem fit on node? An exact probe must fit, the others must not.
type probe struct {
	kind, node string
	cpu, mem   int64 // millicores, bytes; 0: not requested
	pod        *v1.Pod
	// simFits and simWhy are the simulator's answer; bound and why the
	// scheduler's (why: its message when it found the probe Unschedulable).
	simFits bool
	simWhy  string
	bound   bool
	why     string
	// boundTo is the node the scheduler bound it to; after, for a probe
	// it decided otherwise than the simulation, what its cache held on the
	// node then.
	boundTo, after string
}

func newProbe(ns, kind, node string, cpu, mem int64) *probe {
	req := v1.ResourceList{}
	if cpu > 0 {
		req[v1.ResourceCPU] = *resource.NewMilliQuantity(cpu, resource.DecimalSI)
	}
	if mem > 0 {
		req[v1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
	}
	p := wrappers.MakePod("probe-"+kind+"-"+node, ns).OnNode(node).Label(labelProbe, kind).NoGrace().Obj()
	p.Spec.Containers[0].Resources.Requests = req
	return &probe{kind: kind, node: node, cpu: cpu, mem: mem, pod: p}
}

func (p *probe) wantFits() bool { return p.kind == probeExact }

func (p *probe) size() string {
	switch p.kind {
	case probeOverCPU:
		return milli(p.cpu) + " CPU"
	case probeOverMemory:
		return bytesOf(p.mem-1) + " and a byte of memory"
	}
	var parts []string
	if p.cpu > 0 {
		parts = append(parts, milli(p.cpu)+" CPU")
	}
	if p.mem > 0 {
		parts = append(parts, bytesOf(p.mem)+" memory")
	}
	return strings.Join(parts, " and ")
}

// comparison is what compare found.
type comparison struct {
	probes int
	// full counts the nodes the simulation sees no CPU free on (only the
	// over-by-one probes ask there).
	full int
	// disagreements are one message per node where the simulation, the
	// arithmetic of its pods or the scheduler say different things.
	disagreements []string
}

// compare probes every node of nodes (in namespace ns): first the
// over-by-one probes of all nodes at once, then, once they are gone, the
// exact ones.
func (a *agreement) compare(ctx context.Context, ns string, nodes []string) comparison {
	t := a.e.t
	t.Helper()
	snap := a.snapshot(ctx)
	cached := a.sched.Sched.Cache.Dump()
	var out comparison
	frees := map[string]nodeFree{}
	var over, exact []*probe
	for _, n := range nodes {
		f, ok := snap.free(n)
		if !ok {
			t.Fatalf("node %s is not in the simulation's snapshot", n)
		}
		frees[n] = f
		if f.cpu <= 0 {
			out.full++
		}
		cpu, mem := max(f.cpu, 0), max(f.mem, 0)
		over = append(over, newProbe(ns, probeOverCPU, n, cpu+1, 0), newProbe(ns, probeOverMemory, n, 0, mem+1))
		if cpu > 0 || mem > 0 {
			exact = append(exact, newProbe(ns, probeExact, n, cpu, mem))
		}
	}
	all := append(append([]*probe(nil), over...), exact...)
	for _, p := range all {
		placed, err := a.sim.Place(ctx, snap.cluster, []simulator.PodSet{{Name: p.pod.Name, Pod: p.pod, Count: 1}})
		var u *simulator.Unschedulable
		switch {
		case errors.As(err, &u):
			p.simWhy = u.Reason
		case err != nil:
			t.Fatalf("simulating %s: %v", p.pod.Name, err)
		default:
			p.simFits = true
			if got := placed[p.pod.Name]; len(got) != 1 || got[0] != p.node {
				t.Fatalf("the simulation placed %s, pinned to %s, on %v", p.pod.Name, p.node, got)
			}
		}
	}
	a.run(ctx, ns, over)
	a.run(ctx, ns, exact)

	out.probes = len(all)
	byNode := map[string][]*probe{}
	for _, p := range all {
		if p.simFits != p.wantFits() || p.bound != p.wantFits() {
			byNode[p.node] = append(byNode[p.node], p)
		}
	}
	for _, n := range nodes {
		if ps := byNode[n]; len(ps) > 0 {
			msg := describeDisagreement(frees[n], ps, snap)
			if ni := cached.Nodes[n]; ni != nil {
				msg += "\n  " + describeCached(ni)
			}
			out.disagreements = append(out.disagreements, msg)
		}
	}
	return out
}

// run creates the probes, waits until the scheduler has bound each of them
// or found it Unschedulable, records which, and deletes them.
func (a *agreement) run(ctx context.Context, ns string, probes []*probe) {
	t := a.e.t
	t.Helper()
	if len(probes) == 0 {
		return
	}
	pods := a.e.Client.CoreV1().Pods(ns)
	byName := map[string]*probe{}
	for _, p := range probes {
		byName[p.pod.Name] = p
	}
	if err := createAll(ctx, probes, func(ctx context.Context, p *probe) error {
		_, err := pods.Create(ctx, p.pod, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	util.Must(t).Poll(ctx, util.Timeout, "the scheduler decides every probe", func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: labelProbe})
		if err != nil {
			return false, err
		}
		var undecided []string
		for i := range list.Items {
			pod := &list.Items[i]
			p := byName[pod.Name]
			switch {
			case p == nil:
			case pod.Spec.NodeName != "":
				p.bound, p.boundTo, p.why = true, pod.Spec.NodeName, ""
			case util.Unschedulable(pod):
				p.why = util.PodCondition(pod, v1.PodScheduled).Message
			default:
				undecided = append(undecided, pod.Name)
			}
		}
		return len(undecided) == 0, fmt.Errorf("undecided: %v", undecided)
	})
	var dump *cache.Dump
	var rs *schedv1alpha1.ReservationList
	for _, p := range probes {
		if p.bound != p.wantFits() {
			if dump == nil {
				dump = a.sched.Sched.Cache.Dump()
				var err error
				if rs, err = a.e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if ni := dump.Nodes[p.node]; ni != nil {
				p.after = describeCached(ni)
			}
			for i := range rs.Items {
				if r := &rs.Items[i]; r.Status.NodeName == p.node {
					p.after += "; reservation " + r.Name + " " + describeReservation(r)
				}
			}
		}
	}
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	if err := pods.DeleteCollection(ctx, zero, metav1.ListOptions{LabelSelector: labelProbe}); err != nil {
		t.Fatal(err)
	}
	util.Must(t).Poll(ctx, util.Timeout, "probes deleted", func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: labelProbe})
		if err != nil {
			return false, err
		}
		return len(list.Items) == 0, fmt.Errorf("%d probes left", len(list.Items))
	})
	// The scheduler's cache and its queue follow the pod informer through
	// handlers of their own: the next probes must not be scheduled while
	// the cache still holds these.
	util.Must(t).Poll(ctx, util.Timeout, "probes gone from the scheduler's cache", func(context.Context) (bool, error) {
		for _, ni := range a.sched.Sched.Cache.Dump().Nodes {
			for _, pi := range ni.GetPods() {
				if p := pi.GetPod(); p.Namespace == ns && byName[p.Name] != nil {
					return false, fmt.Errorf("%s still cached", p.Name)
				}
			}
		}
		return true, nil
	})
}

// describeDisagreement says, for one node, what each side said of the
// probes they disagree on, and what the node holds: the Reservations on it
// (placed there, or pending for it), the pods bound into them, and the
// simulation's pods.
func describeDisagreement(f nodeFree, probes []*probe, snap *snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s (allocatable %s CPU, %s memory): the simulation sees %s CPU and %s memory free",
		f.node, milli(f.allocCPU), bytesOf(f.allocMem), milli(f.cpu), bytesOf(f.mem))
	for _, p := range probes {
		fmt.Fprintf(&b, "\n  probe %s of %s: ", p.kind, p.size())
		if p.simFits != p.wantFits() {
			fmt.Fprintf(&b, "the simulator says it %s, against the sum of the simulation's pods; ", fitsWord(p.simFits))
		}
		if p.bound {
			fmt.Fprintf(&b, "the scheduler bound it to %s (it grants more than the simulation sees free)", p.boundTo)
		} else {
			fmt.Fprintf(&b, "the scheduler found it Unschedulable (it grants less than the simulation sees free): %s", p.why)
		}
		if p.bound == p.wantFits() {
			b.WriteString(" [as the simulation says]")
		}
		if p.after != "" {
			b.WriteString("\n    once it decided, " + p.after)
		}
	}
	for i := range snap.reservations {
		r := &snap.reservations[i]
		if r.Status.NodeName != f.node && (r.Status.NodeName != "" || r.Spec.Template.NodeName != f.node) {
			continue
		}
		fmt.Fprintf(&b, "\n  reservation %s: %s", r.Name, describeReservation(r))
		for j := range snap.pods {
			p := &snap.pods[j]
			if provisioning.AllocatedTo(p) == r.UID {
				fmt.Fprintf(&b, "\n    pod %s/%s bound into it: %s on %s, requests %s", p.Namespace, p.Name, phaseOf(p), p.Spec.NodeName, describeList(podRequests(p)))
			}
		}
	}
	b.WriteString("\n  the simulation's pods there:")
	for _, p := range f.pods {
		fmt.Fprintf(&b, " %s/%s (%s)", p.Namespace, p.Name, describeList(podRequests(p)))
	}
	return b.String()
}

// describeCached is what the scheduler's cache held on a node before the
// probes.
func describeCached(ni *framework.NodeInfo) string {
	req := ni.GetRequested()
	s := fmt.Sprintf("the scheduler's cache there: %s CPU and %s memory requested, by", milli(req.GetMilliCPU()), bytesOf(req.GetMemory()))
	for _, pi := range ni.GetPods() {
		p := pi.GetPod()
		name := p.Name
		if p.Namespace != "" {
			name = p.Namespace + "/" + name
		} else {
			name = "reservation " + name
		}
		s += fmt.Sprintf(" %s (%s)", name, describeList(podRequests(p)))
	}
	return s
}

func describeReservation(r *schedv1alpha1.Reservation) string {
	phase := r.Status.Phase
	if phase == "" {
		phase = schedv1alpha1.ReservationPending
	}
	s := fmt.Sprintf("%s, %d booked pods, allocateOnce %v, requests %s, status.allocated %s, currentOwners %v",
		phase, provisioning.BookedPods(r), ptr.Deref(r.Spec.AllocateOnce, true), describeList(r.Spec.Template.Requests),
		describeList(r.Status.Allocated), ownerNames(r.Status.CurrentOwners))
	for _, typ := range []string{schedv1alpha1.ConditionScheduled, schedv1alpha1.ConditionReady} {
		if c := meta.FindStatusCondition(r.Status.Conditions, typ); c != nil {
			s += fmt.Sprintf(", %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return s
}

func ownerNames(refs []v1.ObjectReference) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.Namespace+"/"+r.Name)
	}
	return out
}

func phaseOf(p *v1.Pod) string {
	if p.Status.Phase == "" {
		return string(v1.PodPending)
	}
	return string(p.Status.Phase)
}

func fitsWord(fits bool) string {
	if fits {
		return "fits"
	}
	return "does not fit"
}

func podRequests(p *v1.Pod) v1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}

// describeList prints a resource list in a stable order.
func describeList(l v1.ResourceList) string {
	if len(l) == 0 {
		return "{}"
	}
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, string(n))
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		q := l[v1.ResourceName(n)]
		parts = append(parts, n+"="+q.String())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func milli(m int64) string { return resource.NewMilliQuantity(m, resource.DecimalSI).String() }

func bytesOf(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

func terminal(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
}

// ownedBy reports whether one of r's annotation owners (the kind bookings
// have) selects p.
func ownedBy(r *schedv1alpha1.Reservation, p *v1.Pod) bool {
	for _, o := range r.Spec.Owners {
		if o.Annotation == nil || o.Namespace != p.Namespace {
			continue
		}
		if v, ok := p.Annotations[o.Annotation.Key]; ok && v == o.Annotation.Value {
			return true
		}
	}
	return false
}

// liveOwners are the pods the scheduler counts against an Available
// reservation: bound into it (its allocation annotation) on its node, not
// finished, and owned by it. Once the status controller has caught up,
// status.currentOwners lists exactly these, when there are any.
func liveOwners(r *schedv1alpha1.Reservation, pods []v1.Pod) []types.UID {
	var out []types.UID
	for i := range pods {
		p := &pods[i]
		if provisioning.AllocatedTo(p) == r.UID && p.Spec.NodeName != "" && p.Spec.NodeName == r.Status.NodeName &&
			!terminal(p) && p.DeletionTimestamp == nil && ownedBy(r, p) {
			out = append(out, p.UID)
		}
	}
	slices.Sort(out)
	return out
}

// expiryHorizon: a reservation that expires sooner than this is waited
// for until it has ended, so that no expiry falls between the snapshot
// and the probes.
const expiryHorizon = time.Minute

// caughtUp reports whether the scheduler's status controller has written
// all it will of r, given the pods (or why not). An Available reservation
// records its live owners once it has any (and an allocate-once one is
// then Succeeded); one whose TTL ends within expiryHorizon has ended; a
// pending one has been tried and found unschedulable.
func caughtUp(r *schedv1alpha1.Reservation, pods []v1.Pod, now time.Time) (bool, string) {
	phase := r.Status.Phase
	if phase == schedv1alpha1.ReservationSucceeded || phase == schedv1alpha1.ReservationFailed {
		return true, ""
	}
	if r.Spec.TTL != nil && now.Add(expiryHorizon).After(r.CreationTimestamp.Add(r.Spec.TTL.Duration)) {
		return false, "expires soon, still " + string(phase)
	}
	if phase == "" || phase == schedv1alpha1.ReservationPending {
		c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionScheduled)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != schedv1alpha1.ReasonUnschedulable {
			return false, "pending, not found unschedulable yet"
		}
		return true, ""
	}
	live := liveOwners(r, pods)
	if len(live) == 0 {
		if ptr.Deref(r.Spec.AllocateOnce, true) && len(r.Status.CurrentOwners) > 0 {
			return false, "allocate-once with an owner recorded, still Available"
		}
		return true, ""
	}
	if ptr.Deref(r.Spec.AllocateOnce, true) {
		return false, "allocate-once with a live owner, still Available"
	}
	recorded := make([]types.UID, 0, len(r.Status.CurrentOwners))
	for _, o := range r.Status.CurrentOwners {
		recorded = append(recorded, o.UID)
	}
	slices.Sort(recorded)
	if !slices.Equal(recorded, live) {
		return false, fmt.Sprintf("records %d owners, %d live", len(recorded), len(live))
	}
	return true, ""
}

// bookingsOf are the Reservations booked for the requests of namespace ns.
func bookingsOf(rs []schedv1alpha1.Reservation, ns string) []schedv1alpha1.Reservation {
	var out []schedv1alpha1.Reservation
	for _, r := range rs {
		if strings.HasPrefix(r.Annotations[provisioning.AnnotationRequest], ns+"/") {
			out = append(out, r)
		}
	}
	return out
}

// settle waits until the scheduler is done with namespace ns: every pod
// bound, finished or found Unschedulable; the status controller caught up
// with every booking of its requests (caughtUp); and none of them changed
// for settleQuiet. The status controller has no resync period: it writes
// when the scheduler's store tells it that a reservation or an owner
// changed (or at an expiry), so a quiet spell after the writes agree with
// the pods means it has nothing left to write.
func (a *agreement) settle(ctx context.Context, ns string) {
	t := a.e.t
	t.Helper()
	var last map[string]string
	var since time.Time
	util.Must(t).Poll(ctx, util.LongTimeout, "bookings and pods of "+ns+" settled", func(ctx context.Context) (bool, error) {
		rs, err := a.e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods, err := a.e.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		now := time.Now()
		versions := map[string]string{}
		for _, p := range pods.Items {
			versions["pod "+p.Name] = p.ResourceVersion
			if p.Spec.NodeName == "" && !terminal(&p) && !util.Unschedulable(&p) {
				last = nil
				return false, fmt.Errorf("pod %s not decided: %s", p.Name, util.DescribePod(&p))
			}
		}
		for _, r := range bookingsOf(rs.Items, ns) {
			versions["reservation "+r.Name] = r.ResourceVersion
			if ok, why := caughtUp(&r, pods.Items, now); !ok {
				last = nil
				return false, fmt.Errorf("reservation %s: %s", r.Name, why)
			}
		}
		if !reflect.DeepEqual(versions, last) {
			last, since = versions, now
			return false, errors.New("changed in the last check")
		}
		return now.Sub(since) >= settleQuiet, errors.New("quiet, not long enough yet")
	})
}

// createNode creates a Ready, untainted node labelled with its hostname
// and labels, of cpu millicores and mem bytes.
func (e *env) createNode(ctx context.Context, name string, cpu, mem int64, labels map[string]string) error {
	w := wrappers.MakeNode(name).Label(v1.LabelHostname, name).
		Capacity("cpu", milli(cpu), "memory", strconv.FormatInt(mem, 10), "pods", "110")
	for k, v := range labels {
		w.Label(k, v)
	}
	node := w.Obj()
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	nodes := e.Client.CoreV1().Nodes()
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	// Admission taints a new node not-ready, and no node controller runs
	// here to lift the taint.
	created.Status = node.Status
	if created, err = nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return err
	}
	created.Spec.Taints = nil
	_, err = nodes.Update(ctx, created, metav1.UpdateOptions{})
	return err
}

// bookingRequest is a request the tests book capacity for by hand: created
// (with its PodTemplate) so that its bookings name a real one, and never
// served, for no provisioner runs.
type bookingRequest struct {
	ns, name string
	uid      types.UID
	cpu, mem int64 // of each pod
}

// createRequest creates request name in ns for count pods of cpu and mem.
func (e *env) createRequest(ctx context.Context, ns, name string, count int, cpu, mem int64) (*bookingRequest, error) {
	pt := wrappers.MakePodTemplate(name, ns).Requests("cpu", milli(cpu), "memory", strconv.FormatInt(mem, 10)).Obj()
	if _, err := e.Client.CoreV1().PodTemplates(ns).Create(ctx, pt, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	pr := wrappers.MakeProvisioningRequest(name, ns, provv1.ClassCheckCapacity).PodSet(name, int32(max(count, 1))).Obj()
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Create(ctx, pr, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return &bookingRequest{ns: ns, name: name, uid: pr.UID, cpu: cpu, mem: mem}, nil
}

// booking is Reservation i of a request's booking: count of its pods on
// node, as the provisioner makes it (booking.go, bookingFor): its name,
// the request's UID label and name annotation, the booked pods, owned by
// the pods that consume the request (either annotation), pinned to the node
// the simulation chose, never preempting, consumed once when it holds one
// pod.
func (q *bookingRequest) booking(i int, node string, count int, ttl time.Duration) *schedv1alpha1.Reservation {
	owners := make([]schedv1alpha1.ReservationOwner, 0, 2)
	for _, key := range []string{provv1.AnnotationConsume, provv1.AnnotationConsumeLegacy} {
		owners = append(owners, schedv1alpha1.ReservationOwner{
			Annotation: &schedv1alpha1.OwnerAnnotation{Key: key, Value: q.name}, Namespace: q.ns})
	}
	return &schedv1alpha1.Reservation{
		ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("provreq-%s-0-%d", q.uid, i),
			Labels: map[string]string{provisioning.LabelRequestUID: string(q.uid)},
			Annotations: map[string]string{provisioning.AnnotationRequest: q.ns + "/" + q.name,
				provisioning.AnnotationBookedPods: strconv.Itoa(count)},
		},
		Spec: schedv1alpha1.ReservationSpec{
			Template: schedv1alpha1.ReservationTemplate{
				Requests: v1.ResourceList{
					v1.ResourceCPU:    *resource.NewMilliQuantity(q.cpu*int64(count), resource.DecimalSI),
					v1.ResourceMemory: *resource.NewQuantity(q.mem*int64(count), resource.BinarySI),
				},
				NodeName:         node,
				Priority:         ptr.To[int32](0),
				SchedulerName:    v1.DefaultSchedulerName,
				PreemptionPolicy: ptr.To(v1.PreemptNever),
			},
			Owners:       owners,
			TTL:          &metav1.Duration{Duration: ttl},
			AllocateOnce: ptr.To(count == 1),
		},
	}
}

// ownerPod is a pod that consumes request q through annotation key,
// requesting cpu and mem.
func (q *bookingRequest) ownerPod(name, key string, cpu, mem int64) *v1.Pod {
	return wrappers.MakePod(name, q.ns).Annotation(key, q.name).NoGrace().
		Requests("cpu", milli(cpu), "memory", strconv.FormatInt(mem, 10)).Obj()
}

// plainPod is a pod that consumes nothing, pinned to node.
func plainPod(ns, name, node string, cpu, mem int64) *v1.Pod {
	return wrappers.MakePod(name, ns).OnNode(node).NoGrace().
		Requests("cpu", milli(cpu), "memory", strconv.FormatInt(mem, 10)).Obj()
}

// setPhase writes a pod's phase, as a kubelet (or kwok) would.
func (e *env) setPhase(ctx context.Context, ns, name string, phase v1.PodPhase) error {
	p, err := e.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	p.Status.Phase = phase
	_, err = e.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// waitPods waits until every pod of ns is bound or found Unschedulable,
// and returns them.
func (e *env) waitPods(ctx context.Context, ns string) []v1.Pod {
	e.t.Helper()
	var out []v1.Pod
	util.Must(e.t).Poll(ctx, util.Timeout, "pods of "+ns+" scheduled", func(ctx context.Context) (bool, error) {
		list, err := e.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.Spec.NodeName == "" && !util.Unschedulable(p) {
				return false, errors.New(util.DescribePod(p))
			}
		}
		out = list.Items
		return true, nil
	})
	return out
}

// waitBooking waits until reservation name is Available or, if that is not
// what is wanted, found Unschedulable; expiring ones may also have ended.
func (e *env) waitBooking(ctx context.Context, name string, available bool) *schedv1alpha1.Reservation {
	e.t.Helper()
	return util.Must(e.t).WaitForReservation(ctx, util.Timeout, e.Gantry, name, "booking placed or found unschedulable", func(r *schedv1alpha1.Reservation) bool {
		if available {
			return r.Status.Phase != "" && r.Status.Phase != schedv1alpha1.ReservationPending
		}
		c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionScheduled)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == schedv1alpha1.ReasonUnschedulable
	})
}

// createAll creates objects (pods or Reservations), several at a time.
func createAll[T any](ctx context.Context, objs []T, create func(context.Context, T) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, o := range objs {
		g.Go(func() error { return create(gctx, o) })
	}
	return g.Wait()
}
