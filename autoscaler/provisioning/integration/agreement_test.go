//go:build integration

package integration

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
)

var (
	agreementSeed   = flag.Int64("agreement-seed", 0, "seed of TestSimulationAgreesWithScheduler (0: a new one, printed); round i runs on seed+i")
	agreementRounds = flag.Int("agreement-rounds", 10, "rounds of TestSimulationAgreesWithScheduler")
)

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
)

// TestSimulationAgreesWithScheduler: the free capacity the provisioner's
// simulation sees on a node is what Gantry's scheduler grants there
// (agreement_probe_test.go says how each node is probed), whatever mix of
// bookings, owners and pods holds it. Each round builds a random mix
// through the API on fresh nodes of random sizes: pods that consume
// nothing; requests booked as the provisioner books them, one Reservation
// per node created Pending for its node and placed by the scheduler, some
// for several pods, some expiring, and at times one that no longer fits
// its node (its room was taken between the simulation and the booking);
// then the requests' pods, which the scheduler binds into the bookings.
// Some of them finish or are deleted: for a share of the bookings before
// the scheduler's status controller could record them (its status writes
// fail meanwhile), for the others after. Once everything has settled, every
// node is probed.
//
// The seed is printed; -agreement-seed replays a run, and
// -agreement-rounds sets how many rounds it has:
//
//	go test -tags integration ./autoscaler/provisioning/integration -run TestSimulationAgreesWithScheduler -v -agreement-seed=N
func TestSimulationAgreesWithScheduler(t *testing.T) {
	ctx := context.Background()
	seed := *agreementSeed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	t.Logf("seed %d: replay with -agreement-seed=%d (round i alone: -agreement-seed=<seed+i> -agreement-rounds=1)", seed, seed)
	e := newEnv(t)
	a := newAgreement(e, e.StartScheduler(schedtest.GantryProfile))
	start := time.Now()
	var nodes, probes, disagreements int
	for i := range *agreementRounds {
		r := &round{a: a, e: e, seed: seed + int64(i), ns: fmt.Sprintf("agree-%d", i)}
		r.rng = rand.New(rand.NewPCG(uint64(r.seed), 0))
		st := r.run(ctx)
		t.Logf("round %d (seed %d): %s", i, r.seed, st)
		for _, d := range st.disagreements {
			t.Errorf("round %d (seed %d): %s", i, r.seed, d)
		}
		nodes, probes, disagreements = nodes+st.nodes, probes+st.probes, disagreements+len(st.disagreements)
	}
	t.Logf("%d rounds in %s: %d nodes, %d probes, %d disagreements", *agreementRounds, time.Since(start).Round(100*time.Millisecond),
		nodes, probes, disagreements)
}

// labelRound marks a round's nodes.
const labelRound = "agreement.gantry.dev/round"

// round is one mix, built in namespace ns from its own seed.
type round struct {
	a    *agreement
	e    *env
	seed int64
	rng  *rand.Rand
	ns   string

	nodes []string
	// room is what the round has left free on each node, as the scheduler
	// counts it (allocatable less requests), so that what must fit fits.
	room     map[string]*room
	requests []*roundRequest
	// bookings are the round's Reservations by UID, and order them as
	// created: choices over them draw from rng in that order.
	bookings map[types.UID]*roundBooking
	order    []*roundBooking
	// expiring are the nodes some booking that expires is on: the room it
	// gives back is not counted.
	expiring map[string]bool
}

type room struct{ cpu, mem int64 }

func (r *room) fits(cpu, mem int64) bool { return cpu <= r.cpu && mem <= r.mem }

func (r *room) take(cpu, mem int64) { r.cpu, r.mem = r.cpu-cpu, r.mem-mem }

type roundRequest struct {
	*bookingRequest
	booked int
	// owners is how many pods consuming it the round creates.
	owners int
}

const (
	bookingPlaced      = "placed"
	bookingExpiring    = "expiring"
	bookingUnplaceable = "unplaceable"
)

type roundBooking struct {
	name, kind string
	// unrecorded: the status controller's writes of it fail while its
	// owners are bound and finish.
	unrecorded bool
}

// roundStats is what a round did and found.
type roundStats struct {
	nodes, probes      int
	full               int
	reservations       map[string]int
	owners             map[string]int
	plain              map[string]int
	disagreements      []string
	took               time.Duration
	unrecordedBookings int
}

func (s roundStats) String() string {
	return fmt.Sprintf("%d nodes (%d with no CPU free); reservations: %s (%d with status writes failing while owners came and went); owners: %s; plain pods: %s; %d probes; %d disagreements; %s",
		s.nodes, s.full, counts(s.reservations), s.unrecordedBookings, counts(s.owners), counts(s.plain), s.probes, len(s.disagreements), s.took.Round(100*time.Millisecond))
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	total := 0
	for k, n := range m {
		keys = append(keys, k)
		total += n
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

func (r *round) must(err error) {
	r.e.t.Helper()
	if err != nil {
		r.e.t.Fatalf("round %s (seed %d): %v", r.ns, r.seed, err)
	}
}

// run builds the round's mix, waits for it to settle, probes its nodes
// and removes it.
func (r *round) run(ctx context.Context) roundStats {
	start := time.Now()
	st := roundStats{reservations: map[string]int{}, owners: map[string]int{}, plain: map[string]int{}}
	r.room, r.bookings, r.expiring = map[string]*room{}, map[types.UID]*roundBooking{}, map[string]bool{}
	_, err := r.e.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{})
	r.must(err)
	r.createNodes(ctx)
	r.createPlainPods(ctx)
	r.book(ctx)
	r.fill(ctx)
	r.bookUnplaceable(ctx)

	// A share of the placed bookings cannot have their status written
	// while their owners come and go: what those owners do happens before
	// the status controller records them.
	for _, b := range r.order {
		if b.kind == bookingPlaced && r.rng.Float64() < 0.35 {
			b.unrecorded = true
			st.unrecordedBookings++
			r.e.Faults.Fail("PUT", "/reservations/"+b.name+"/status", 500)
		}
	}
	r.createOwners(ctx)
	pods := r.e.waitPods(ctx, r.ns)
	r.markRunning(ctx, pods)
	r.waitRecorded(ctx)
	r.applyFates(ctx, pods, &st)
	r.e.Faults.Clear()
	r.poke(ctx)

	r.a.settle(ctx, r.ns)
	cmp := r.a.compare(ctx, r.ns, r.nodes)
	st.nodes, st.full, st.probes, st.disagreements = len(r.nodes), cmp.full, cmp.probes, cmp.disagreements
	r.countReservations(ctx, &st)
	r.cleanup(ctx)
	st.took = time.Since(start)
	return st
}

// createNodes creates 8 to 12 nodes of 2 to 8.75 CPUs and 4 to 16.75 GiB.
func (r *round) createNodes(ctx context.Context) {
	n := 8 + r.rng.IntN(5)
	type spec struct {
		name     string
		cpu, mem int64
	}
	var specs []spec
	for j := range n {
		s := spec{name: fmt.Sprintf("%s-n%d", r.ns, j),
			cpu: int64(2000 + r.rng.IntN(7)*1000 + r.rng.IntN(4)*250),
			mem: int64(4+r.rng.IntN(13))*gi + int64(r.rng.IntN(4))*256*mi}
		specs = append(specs, s)
		r.nodes = append(r.nodes, s.name)
		r.room[s.name] = &room{cpu: s.cpu, mem: s.mem}
	}
	r.must(createAll(ctx, specs, func(ctx context.Context, s spec) error {
		return r.e.createNode(ctx, s.name, s.cpu, s.mem, map[string]string{labelRound: r.ns, "type": "kwok"})
	}))
}

// createPlainPods creates up to 3 pods that consume nothing on each node.
func (r *round) createPlainPods(ctx context.Context) {
	var pods []*v1.Pod
	for j, node := range r.nodes {
		for k := range r.rng.IntN(4) {
			cpu, mem := int64(100+r.rng.IntN(19)*50), int64(1+r.rng.IntN(16))*64*mi
			if room := r.room[node]; room.fits(cpu, mem) {
				room.take(cpu, mem)
				pods = append(pods, plainPod(r.ns, fmt.Sprintf("plain-%d-%d", j, k), node, cpu, mem))
			}
		}
	}
	r.createPods(ctx, pods)
	r.expectBound(ctx)
}

// book creates 3 to 6 requests, each booked on 1 to 3 nodes for 1 to 4 of
// its pods per node where they fit, and waits until the scheduler has
// placed the bookings.
func (r *round) book(ctx context.Context) {
	var all []newBooking
	for k := range 3 + r.rng.IntN(4) {
		cpu, mem := int64(100+r.rng.IntN(15)*100), int64(2+r.rng.IntN(31))*64*mi
		type planned struct {
			node  string
			count int
			ttl   time.Duration
			kind  string
		}
		var plan []planned
		booked := 0
		for _, j := range r.rng.Perm(len(r.nodes))[:1+r.rng.IntN(3)] {
			node := r.nodes[j]
			count := 1 + r.rng.IntN(4)
			for count > 0 && !r.room[node].fits(cpu*int64(count), mem*int64(count)) {
				count--
			}
			if count == 0 {
				continue
			}
			r.room[node].take(cpu*int64(count), mem*int64(count))
			p := planned{node: node, count: count, ttl: provisioning.DefaultBookingDuration, kind: bookingPlaced}
			if r.rng.Float64() < 0.1 {
				p.ttl, p.kind = 2*time.Second, bookingExpiring
				r.expiring[node] = true
			}
			plan = append(plan, p)
			booked += count
		}
		q, err := r.e.createRequest(ctx, r.ns, fmt.Sprintf("req-%d", k), booked, cpu, mem)
		r.must(err)
		rq := &roundRequest{bookingRequest: q, booked: booked, owners: r.rng.IntN(booked + 2)}
		r.requests = append(r.requests, rq)
		for i, p := range plan {
			res := q.booking(i, p.node, p.count, p.ttl)
			all = append(all, newBooking{res, &roundBooking{name: res.Name, kind: p.kind}})
		}
	}
	r.createBookings(ctx, all, true)
}

// newBooking is a Reservation to create and what the round knows of it.
type newBooking struct {
	res *schedv1alpha1.Reservation
	b   *roundBooking
}

// createBookings creates the Reservations and waits until each is placed
// (available) or found unschedulable (not available).
func (r *round) createBookings(ctx context.Context, nbs []newBooking, available bool) {
	r.must(createAll(ctx, nbs, func(ctx context.Context, nb newBooking) error {
		created, err := r.e.Gantry.SchedulingV1alpha1().Reservations().Create(ctx, nb.res, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		nb.res.UID = created.UID
		return nil
	}))
	for _, nb := range nbs {
		r.bookings[nb.res.UID] = nb.b
		r.order = append(r.order, nb.b)
		r.e.waitBooking(ctx, nb.res.Name, available)
	}
}

// fill, in some rounds, takes every free millicore of a node, and all or
// half of its free memory, with a pod that consumes nothing: the node has
// no CPU free.
func (r *round) fill(ctx context.Context) {
	if r.rng.Float64() >= 0.4 {
		return
	}
	var candidates []string
	for _, n := range r.nodes {
		if r.room[n].cpu > 0 && !r.expiring[n] {
			candidates = append(candidates, n)
		}
	}
	if len(candidates) == 0 {
		return
	}
	node := candidates[r.rng.IntN(len(candidates))]
	room := r.room[node]
	mem := room.mem
	if r.rng.Float64() < 0.5 {
		mem /= 2
	}
	cpu := room.cpu
	room.take(cpu, mem)
	r.createPods(ctx, []*v1.Pod{plainPod(r.ns, "filler", node, cpu, mem)})
	r.expectBound(ctx)
}

// bookUnplaceable, in half the rounds, books a request on a node that no
// longer has the room: the scheduler leaves it Pending, found
// unschedulable, until the provisioner gives up on it (after its placement
// timeout; it does not run here).
func (r *round) bookUnplaceable(ctx context.Context) {
	if r.rng.Float64() >= 0.5 {
		return
	}
	var candidates []string
	for _, n := range r.nodes {
		if !r.expiring[n] {
			candidates = append(candidates, n)
		}
	}
	node := candidates[r.rng.IntN(len(candidates))]
	room := r.room[node]
	cpu := room.cpu + int64(100+r.rng.IntN(10)*100)
	mem := max(min(room.mem, int64(1+r.rng.IntN(16))*128*mi), 64*mi)
	q, err := r.e.createRequest(ctx, r.ns, "late", 1, cpu, mem)
	r.must(err)
	r.requests = append(r.requests, &roundRequest{bookingRequest: q, booked: 1, owners: r.rng.IntN(2)})
	res := q.booking(0, node, 1, provisioning.DefaultBookingDuration)
	r.createBookings(ctx, []newBooking{{res, &roundBooking{name: res.Name, kind: bookingUnplaceable}}}, false)
}

// createOwners creates each request's pods: up to one more than it
// booked, most of its pods' size, some smaller or larger; most name the
// request in the consume annotation, some in the legacy one.
func (r *round) createOwners(ctx context.Context) {
	var pods []*v1.Pod
	for _, q := range r.requests {
		for k := range q.owners {
			f := 1.0
			switch x := r.rng.Float64(); {
			case x < 0.1:
				f = 0.5 + 0.4*r.rng.Float64()
			case x < 0.2:
				f = 1.1 + 0.2*r.rng.Float64()
			}
			cpu := max(int64(float64(q.cpu)*f)/10*10, 10)
			mem := max(int64(float64(q.mem)*f)/mi*mi, mi)
			key := provv1.AnnotationConsume
			if r.rng.Float64() < 0.15 {
				key = provv1.AnnotationConsumeLegacy
			}
			pods = append(pods, q.ownerPod(fmt.Sprintf("owner-%s-%d", q.name, k), key, cpu, mem))
		}
	}
	r.createPods(ctx, pods)
}

func (r *round) createPods(ctx context.Context, pods []*v1.Pod) {
	r.must(createAll(ctx, pods, func(ctx context.Context, p *v1.Pod) error {
		_, err := r.e.Client.CoreV1().Pods(r.ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	}))
}

// expectBound waits for the round's pods to be scheduled and fails if one
// the round made room for was not bound.
func (r *round) expectBound(ctx context.Context) {
	for _, p := range r.e.waitPods(ctx, r.ns) {
		if p.Spec.NodeName == "" {
			r.must(fmt.Errorf("the scheduler did not bind a pod the round made room for: %s", util.DescribePod(&p)))
		}
	}
}

// markRunning moves the bound pods to Running, as kwok does.
func (r *round) markRunning(ctx context.Context, pods []v1.Pod) {
	var bound []string
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Status.Phase != v1.PodRunning {
			bound = append(bound, p.Name)
		}
	}
	r.must(createAll(ctx, bound, func(ctx context.Context, name string) error {
		return r.e.setPhase(ctx, r.ns, name, v1.PodRunning)
	}))
}

// waitRecorded waits until the status controller has recorded the owners
// of every booking whose status writes do not fail (but those about to
// expire, which settle waits for).
func (r *round) waitRecorded(ctx context.Context) {
	util.Must(r.e.t).Poll(ctx, util.Timeout, "owners recorded", func(ctx context.Context) (bool, error) {
		rs, err := r.e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods, err := r.e.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, res := range bookingsOf(rs.Items, r.ns) {
			if b := r.bookings[res.UID]; b == nil || b.unrecorded || b.kind == bookingExpiring {
				continue
			}
			if ok, why := caughtUp(&res, pods.Items, time.Now()); !ok {
				return false, fmt.Errorf("reservation %s: %s", res.Name, why)
			}
		}
		return true, nil
	})
}

// applyFates lets each bound pod run on, succeed, fail or be deleted:
// owners 45/20/10/25 in a hundred, pods that consume nothing 70/15/0/15.
// The filler runs on.
func (r *round) applyFates(ctx context.Context, pods []v1.Pod, st *roundStats) {
	type fate struct {
		name, what string
	}
	var fates []fate
	for i := range pods {
		p := &pods[i]
		owner := strings.HasPrefix(p.Name, "owner-")
		x := r.rng.Float64()
		if p.Spec.NodeName == "" {
			st.owners["unschedulable"]++
			continue
		}
		what := "running"
		switch {
		case p.Name == "filler":
		case owner && x < 0.45, !owner && x < 0.7:
		case owner && x < 0.65, !owner && x < 0.85:
			what = "succeeded"
		case owner && x < 0.75:
			what = "failed"
		default:
			what = "deleted"
		}
		fates = append(fates, fate{p.Name, what})
		if !owner {
			st.plain[what]++
			continue
		}
		b := r.bookings[provisioning.AllocatedTo(p)]
		switch {
		case b == nil:
			st.owners[what+" outside bookings"]++
		case b.unrecorded && what != "running":
			st.owners[what+" before recorded"]++
		default:
			st.owners[what]++
		}
	}
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	r.must(createAll(ctx, fates, func(ctx context.Context, f fate) error {
		switch f.what {
		case "succeeded":
			return r.e.setPhase(ctx, r.ns, f.name, v1.PodSucceeded)
		case "failed":
			return r.e.setPhase(ctx, r.ns, f.name, v1.PodFailed)
		case "deleted":
			return r.e.Client.CoreV1().Pods(r.ns).Delete(ctx, f.name, zero)
		}
		return nil
	}))
}

// poke touches the bookings whose status writes failed, so that the
// status controller looks at them now rather than when its rate-limited
// retry comes (up to seconds later).
func (r *round) poke(ctx context.Context) {
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"agreement.gantry.dev/poke":"%d"}}}`, time.Now().UnixNano()))
	var names []string
	for _, b := range r.order {
		if b.unrecorded {
			names = append(names, b.name)
		}
	}
	r.must(createAll(ctx, names, func(ctx context.Context, name string) error {
		_, err := r.e.Gantry.SchedulingV1alpha1().Reservations().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}))
}

// countReservations sums the round's bookings up by phase, as they ended.
func (r *round) countReservations(ctx context.Context, st *roundStats) {
	rs, err := r.e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
	r.must(err)
	for _, res := range bookingsOf(rs.Items, r.ns) {
		phase := string(res.Status.Phase)
		if phase == "" {
			phase = string(schedv1alpha1.ReservationPending)
		}
		if provisioning.BookedPods(&res) > 1 {
			phase += " multi-pod"
		}
		st.reservations[phase]++
	}
}

// cleanup removes the round's pods, bookings and nodes; the next round
// has nodes of its own, so it waits for none of it.
func (r *round) cleanup(ctx context.Context) {
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	r.must(r.e.Client.CoreV1().Pods(r.ns).DeleteCollection(ctx, zero, metav1.ListOptions{}))
	for _, b := range r.order {
		if err := r.e.Gantry.SchedulingV1alpha1().Reservations().Delete(ctx, b.name, zero); err != nil {
			r.e.t.Logf("deleting reservation %s: %v", b.name, err)
		}
	}
	r.must(r.e.Client.CoreV1().Nodes().DeleteCollection(ctx, zero, metav1.ListOptions{LabelSelector: labelRound + "=" + r.ns}))
}

// TestAgreementSharedBookingOwnersGone: a booking for two pods, both of
// whose pods came, were recorded by the status controller, and then went
// (one finished, one was deleted). The scheduler holds for a booking what
// its live owners do not use; the simulation must see the same free.
// Before withLiveAllocation (snapshot.go) it took status.allocated, which
// the status controller keeps once no owner is left, and saw a pod's room
// free that the scheduler held.
func TestAgreementSharedBookingOwnersGone(t *testing.T) {
	ctx := context.Background()
	const ns, node = "shared", "node-a"
	e, a, must := agreementCase(ctx, t, ns, node)
	q, err := e.createRequest(ctx, ns, "jobs", 2, 1000, gi)
	must(err)
	res, err := e.Gantry.SchedulingV1alpha1().Reservations().Create(ctx, q.booking(0, node, 2, provisioning.DefaultBookingDuration), metav1.CreateOptions{})
	must(err)
	e.waitBooking(ctx, res.Name, true)
	for _, name := range []string{"jobs-0", "jobs-1"} {
		_, err := e.Client.CoreV1().Pods(ns).Create(ctx, q.ownerPod(name, provv1.AnnotationConsume, 1000, gi), metav1.CreateOptions{})
		must(err)
	}
	for _, p := range e.waitPods(ctx, ns) {
		if provisioning.AllocatedTo(&p) != res.UID {
			t.Fatalf("pod %s was not bound into the booking: %s", p.Name, util.DescribePod(&p))
		}
		must(e.setPhase(ctx, ns, p.Name, v1.PodRunning))
	}
	recorded := util.Must(t).WaitForReservation(ctx, util.Timeout, e.Gantry, res.Name, "both owners recorded", func(r *schedv1alpha1.Reservation) bool {
		return len(r.Status.CurrentOwners) == 2
	})
	t.Logf("recorded: %s", describeReservation(recorded))
	must(e.setPhase(ctx, ns, "jobs-0", v1.PodSucceeded))
	must(e.Client.CoreV1().Pods(ns).Delete(ctx, "jobs-1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	a.settle(ctx, ns)
	for _, d := range a.compare(ctx, ns, []string{node}).disagreements {
		t.Error(d)
	}
}

// TestAgreementUnplaceableBooking: a booking pinned to a node whose room
// was taken between the simulation and the booking (a pod that consumes
// nothing was bound there meanwhile). The scheduler leaves it Pending,
// found unschedulable, holding nothing, until the provisioner releases it
// after its placement timeout; the simulation must see the same free.
// Before unplaceable (snapshot.go) it counted the booking on the node, and
// saw less free than the scheduler grants.
func TestAgreementUnplaceableBooking(t *testing.T) {
	ctx := context.Background()
	const ns, node = "late", "node-a"
	e, a, must := agreementCase(ctx, t, ns, node)
	_, err := e.Client.CoreV1().Pods(ns).Create(ctx, plainPod(ns, "first", node, 2000, gi), metav1.CreateOptions{})
	must(err)
	e.waitPods(ctx, ns)
	q, err := e.createRequest(ctx, ns, "late", 1, 3000, gi)
	must(err)
	res, err := e.Gantry.SchedulingV1alpha1().Reservations().Create(ctx, q.booking(0, node, 1, provisioning.DefaultBookingDuration), metav1.CreateOptions{})
	must(err)
	e.waitBooking(ctx, res.Name, false)
	a.settle(ctx, ns)
	for _, d := range a.compare(ctx, ns, []string{node}).disagreements {
		t.Error(d)
	}
}

// agreementCase starts a deterministic agreement test: Gantry's scheduler,
// the namespace ns and a node of 4 CPUs and 8Gi named node. must fails the
// test on an error.
func agreementCase(ctx context.Context, t *testing.T, ns, node string) (e *env, a *agreement, must func(error)) {
	t.Helper()
	e = newEnv(t)
	a = newAgreement(e, e.StartScheduler(schedtest.GantryProfile))
	must = func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err)
	must(e.createNode(ctx, node, 4000, 8*gi, nil))
	return e, a, must
}
