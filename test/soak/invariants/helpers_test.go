package invariants

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// t0 is when every test's story starts.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func mtime(d time.Duration) metav1.Time { return metav1.NewTime(at(d)) }

// step is the cluster at one moment: t0+at, and the objects there; a
// frameworkext.NodeView among them is the scheduler's view of a node (none:
// the view was not read).
type step struct {
	at   time.Duration
	objs []any
}

func snapshot(s step) *Snapshot {
	snap := &Snapshot{Time: at(s.at)}
	for _, o := range s.objs {
		switch o := o.(type) {
		case *schedv1alpha1.Reservation:
			snap.Reservations = append(snap.Reservations, o)
		case *provv1.ProvisioningRequest:
			snap.ProvisioningRequests = append(snap.ProvisioningRequests, o)
		case *v1.Pod:
			snap.Pods = append(snap.Pods, o)
		case *v1.Node:
			snap.Nodes = append(snap.Nodes, o)
		case *v1.ResourceQuota:
			snap.ResourceQuotas = append(snap.ResourceQuotas, o)
		case *policyv1alpha1.MetadataPolicy:
			snap.MetadataPolicies = append(snap.MetadataPolicies, o)
		case frameworkext.NodeView:
			snap.SchedulerNodes = append(snap.SchedulerNodes, o)
		case Refusal:
			snap.Refusals = append(snap.Refusals, o)
		default:
			panic(fmt.Sprintf("snapshot cannot hold %T", o))
		}
	}
	return snap
}

// want is a violation a case expects: its invariant, and what its message
// must say.
type want struct {
	invariant string
	says      []string
}

// run feeds the steps to a checker of cfg and checks that it reports the
// wanted violations, no others, each message saying what it must.
func run(t *testing.T, cfg Config, steps []step, wants []want) *Checker {
	t.Helper()
	c := NewChecker(cfg)
	var got []Violation
	for _, s := range steps {
		got = append(got, c.Check(snapshot(s))...)
	}
	var gotNames, wantNames []string
	for _, v := range got {
		t.Log(v)
		gotNames = append(gotNames, v.Invariant)
	}
	for _, w := range wants {
		wantNames = append(wantNames, w.invariant)
	}
	sort.Strings(gotNames)
	sort.Strings(wantNames)
	if diff := cmp.Diff(wantNames, gotNames); diff != "" {
		t.Fatalf("violations (-want +got):\n%s\ngot:\n%s", diff, describe(got))
	}
	for _, w := range wants {
		if !anySays(got, w) {
			t.Errorf("no %s violation says all of %q; got:\n%s", w.invariant, w.says, describe(got))
		}
	}
	return c
}

func anySays(vs []Violation, w want) bool {
	for _, v := range vs {
		if v.Invariant != w.invariant {
			continue
		}
		all := true
		for _, s := range w.says {
			all = all && strings.Contains(v.Message, s)
		}
		if all {
			return true
		}
	}
	return false
}

func describe(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}

func node(name, cpu string) *v1.Node {
	return wrappers.MakeNode(name).Capacity("cpu", cpu, "memory", "16Gi", "pods", "110").Obj()
}

// pod is a running pod of namespace ns, with uid "uid-<name>", requesting
// cpu, bound to node unless node is "".
func pod(ns, name, cpu, node string) *wrappers.PodWrapper {
	w := wrappers.MakePod(name, ns).UID("uid-"+name).Requests("cpu", cpu).Phase(v1.PodRunning)
	if node != "" {
		w.NodeName(node)
	} else {
		w.Phase(v1.PodPending)
	}
	return w
}

// placedIn gives p the allocation annotation of r, as the scheduler binds
// an owner into a reservation.
func placedIn(p *wrappers.PodWrapper, r *schedv1alpha1.Reservation) *wrappers.PodWrapper {
	b, err := json.Marshal(schedv1alpha1.ReservationAllocation{Name: r.Name, UID: r.UID})
	if err != nil {
		panic(err)
	}
	return p.Annotation(schedv1alpha1.AnnotationAllocated, string(b))
}

// rsv is a reservation named name, with uid "uid-<name>", created at
// t0+created, holding cpu.
func rsv(name, cpu string, created time.Duration) *wrappers.ReservationWrapper {
	w := wrappers.MakeReservation(name, "cpu", cpu).UID("uid-" + name)
	w.CreationTimestamp = mtime(created)
	return w
}

// booked makes r a booking of pods pods for the request namespace/name of
// uid, owned by the pods that consume it, as the provisioner books.
func booked(r *wrappers.ReservationWrapper, uid, namespace, name string, pods int) *wrappers.ReservationWrapper {
	r.Label(labelRequestUID, uid).
		Annotation(annotationRequest, namespace+"/"+name).
		Annotation(annotationBookedPods, fmt.Sprint(pods)).
		AllocateOnce(pods == 1)
	for _, key := range []string{provv1.AnnotationConsume, provv1.AnnotationConsumeLegacy} {
		r.Spec.Owners = append(r.Spec.Owners, schedv1alpha1.ReservationOwner{
			Annotation: &schedv1alpha1.OwnerAnnotation{Key: key, Value: name}, Namespace: namespace})
	}
	return r
}

// ready sets r's Ready condition, as the status controller writes it, at
// t0+d.
func ready(r *wrappers.ReservationWrapper, status metav1.ConditionStatus, reason string, d time.Duration) *wrappers.ReservationWrapper {
	r.Status.Conditions = append(r.Status.Conditions, metav1.Condition{
		Type: schedv1alpha1.ConditionReady, Status: status, Reason: reason, LastTransitionTime: mtime(d)})
	return r
}

func owner(p *v1.Pod) v1.ObjectReference {
	return v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

// request is a request of class for count pods of template "t", with uid
// uid, created at t0.
func request(ns, name, uid, class string, count int32) *wrappers.ProvisioningRequestWrapper {
	w := wrappers.MakeProvisioningRequest(name, ns, class).UID(uid).PodSet("t", count)
	w.CreationTimestamp = mtime(0)
	return w
}

// condition sets a condition of pr, transitioned at t0+d.
func condition(pr *wrappers.ProvisioningRequestWrapper, typ string, status metav1.ConditionStatus, reason string, d time.Duration) *wrappers.ProvisioningRequestWrapper {
	pr.Status.Conditions = append(pr.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, LastTransitionTime: mtime(d)})
	return pr
}

func withUID[T interface{ SetUID(types.UID) }](o T, uid string) T {
	o.SetUID(types.UID(uid))
	return o
}
