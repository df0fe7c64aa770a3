package gangs

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

type fixture struct {
	t        *testing.T
	g        *Gangs
	c        client.Client
	pods     cache.Indexer
	recorder *record.FakeRecorder
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := provv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Pod{}, 0, PodIndexers())
	rec := record.NewFakeRecorder(100)
	return &fixture{t: t, c: c, pods: informer.GetIndexer(), recorder: rec,
		g: &Gangs{Client: c, APIReader: c, PodInformer: informer, Recorder: rec, Class: provv1.ClassCheckCapacity, MaxPods: 40, MaxRequestsPerNamespace: 2}}
}

// gang is a gang PodGroup of minCount in namespace ns, with its
// PodGroupInitiallyScheduled condition (status "" for none).
func gang(name string, minCount int32, status metav1.ConditionStatus, reason string) *schedulingv1beta1.PodGroup {
	pg := wrappers.MakePodGroup(name, "ns", minCount).Obj()
	pg.UID = types.UID("uid-" + name)
	if status != "" {
		meta.SetStatusCondition(&pg.Status.Conditions, metav1.Condition{Type: schedulingv1beta1.PodGroupInitiallyScheduled, Status: status, Reason: reason})
	}
	return pg
}

func (f *fixture) member(name, group, cpu string) *v1.Pod {
	f.t.Helper()
	p := wrappers.MakePod(name, "ns").Label("app", group).Requests("cpu", cpu).PodGroup(group).Obj()
	p.Spec.Hostname = name
	if err := f.pods.Add(p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) reconcile(name string) {
	f.t.Helper()
	if _, err := f.g.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}); err != nil {
		f.t.Fatal(err)
	}
}

// request is the request made for group, nil for none.
func (f *fixture) request(group string) *provv1.ProvisioningRequest {
	f.t.Helper()
	pr := &provv1.ProvisioningRequest{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: RequestName(group)}, pr); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		f.t.Fatal(err)
	}
	return pr
}

func (f *fixture) templates() []v1.PodTemplate {
	f.t.Helper()
	list := &v1.PodTemplateList{}
	if err := f.c.List(context.Background(), list); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestRequestForUnschedulableGang: an unschedulable gang gets one request
// of the class, its pod sets its members' distinct specs (host names
// aside) from templates the request owns, its podGroup parameter the
// group; once placed, the request and its templates are deleted. Made
// again, it brings a template an earlier request left up to date.
func TestRequestForUnschedulableGang(t *testing.T) {
	pg := gang("trainer", 3, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable)
	f := newFixture(t, pg)
	f.member("trainer-0", "trainer", "1")
	f.member("trainer-1", "trainer", "1")
	f.member("trainer-2", "trainer", "2")
	bound := wrappers.MakePod("trainer-x", "ns").Label("app", "trainer").Requests("cpu", "1").PodGroup("trainer").NodeName("n1").Obj()
	if err := f.pods.Add(bound); err != nil {
		t.Fatal(err)
	}
	f.member("other-0", "other", "1")

	created := testutil.ToFloat64(requestsMade.WithLabelValues("created"))
	f.reconcile("trainer")
	if d := testutil.ToFloat64(requestsMade.WithLabelValues("created")) - created; d != 1 {
		t.Errorf("gantry_provisioning_pod_group_requests_total{result=created} rose by %v, want 1", d)
	}
	pr := f.request("trainer")
	if pr == nil {
		t.Fatalf("no request for an unschedulable gang; events %v", f.events())
	}
	if pr.Spec.ProvisioningClassName != provv1.ClassCheckCapacity || pr.Spec.Parameters[provisioning.ParameterPodGroup] != "trainer" ||
		pr.Labels[LabelPodGroupUID] != "uid-trainer" || len(pr.OwnerReferences) != 1 || pr.OwnerReferences[0].UID != "uid-trainer" {
		t.Errorf("request %+v", pr.ObjectMeta)
	}
	if len(pr.Spec.PodSets) != 2 || pr.Spec.PodSets[0].Count != 2 || pr.Spec.PodSets[1].Count != 1 {
		t.Fatalf("pod sets %+v, want 2 pods of 1 CPU and 1 of 2 (the bound member not counted)", pr.Spec.PodSets)
	}
	templates := f.templates()
	if len(templates) != 2 {
		t.Fatalf("%d templates, want 2", len(templates))
	}
	for _, pt := range templates {
		spec := pt.Template.Spec
		if spec.SchedulingGroup != nil || spec.Hostname != "" || spec.NodeName != "" || pt.Template.Labels["app"] != "trainer" ||
			len(pt.OwnerReferences) != 1 || pt.OwnerReferences[0].UID != "uid-trainer" {
			t.Errorf("template %s: %+v", pt.Name, pt)
		}
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], ReasonRequestCreated) {
		t.Errorf("events %v", ev)
	}

	// Reconciled again while it is served: nothing changes.
	f.reconcile("trainer")
	if again := f.request("trainer"); again.ResourceVersion != pr.ResourceVersion || len(f.templates()) != 2 {
		t.Errorf("the request changed while it was served")
	}

	// Deleted after it ended (--delete-finished-requests-after), with a
	// template left out of date: made again, the template brought back.
	if err := f.c.Delete(context.Background(), pr); err != nil {
		t.Fatal(err)
	}
	stale := &v1.PodTemplate{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: pr.Spec.PodSets[0].PodTemplateRef.Name}, stale); err != nil {
		t.Fatal(err)
	}
	want := stale.Template.DeepCopy()
	stale.Template.Spec.Containers[0].Image = "stale"
	if err := f.c.Update(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	f.reconcile("trainer")
	if f.request("trainer") == nil {
		t.Fatal("no request made again")
	}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(stale), stale); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(&stale.Template, want) {
		t.Errorf("the template left was not brought up to date: %+v", stale.Template.Spec.Containers[0])
	}
	f.events()

	// Placed: released.
	meta.SetStatusCondition(&pg.Status.Conditions, metav1.Condition{Type: schedulingv1beta1.PodGroupInitiallyScheduled, Status: metav1.ConditionTrue, Reason: "Scheduled"})
	if err := f.c.Update(context.Background(), pg); err != nil {
		t.Fatal(err)
	}
	f.reconcile("trainer")
	if f.request("trainer") != nil || len(f.templates()) != 0 {
		t.Errorf("request or templates left after the gang was placed")
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], ReasonRequestReleased) || !strings.Contains(ev[0], "placed") {
		t.Errorf("events %v", ev)
	}
}

// TestNoRequest: no request for a group the scheduler has not found
// unschedulable, a group that is not a gang, a gang whose members are not
// all there, one with too many members or specs, past the namespace's
// limit, whose request's name a tenant's request holds, or that a tenant's
// request books for already (parameter podGroup); the tenant's are not
// touched, and a request made for a group is deleted with it.
func TestNoRequest(t *testing.T) {
	basic := gang("basic", 1, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable)
	basic.Spec.SchedulingPolicy = schedulingv1beta1.PodGroupSchedulingPolicy{Basic: &schedulingv1beta1.BasicSchedulingPolicy{}}
	tenants := wrappers.MakeProvisioningRequest(RequestName("taken"), "ns", provv1.ClassCheckCapacity).PodSet("t", 1).Obj()
	booking := wrappers.MakeProvisioningRequest("tenants-booking", "ns", provv1.ClassCheckCapacity).PodSet("t", 1).
		Parameters(map[string]provv1.Parameter{provisioning.ParameterPodGroup: "booked"}).Obj()
	f := newFixture(t,
		gang("untried", 1, "", ""),
		gang("error", 1, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonSchedulerError),
		basic,
		gang("partial", 3, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable),
		gang("huge", 1, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable),
		gang("motley", 1, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable),
		gang("taken", 1, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable),
		gang("booked", 1, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable),
		tenants, booking,
	)
	for _, g := range []string{"untried", "error", "basic", "taken", "booked"} {
		f.member(g+"-0", g, "1")
	}
	f.member("partial-0", "partial", "1")
	f.member("partial-1", "partial", "1")
	for i := range 41 {
		f.member(fmt.Sprintf("huge-%d", i), "huge", "1")
	}
	for i := range MaxPodSets + 1 {
		f.member(fmt.Sprintf("motley-%d", i), "motley", fmt.Sprintf("%dm", 100+i))
	}
	for _, g := range []string{"untried", "error", "basic", "partial", "huge", "motley", "taken", "booked"} {
		f.reconcile(g)
		if pr := f.request(g); pr != nil && g != "taken" {
			t.Errorf("%s: a request was made", g)
		}
	}
	if pr := f.request("taken"); pr == nil || pr.Labels[LabelPodGroupUID] != "" || len(pr.Spec.PodSets) != 1 || pr.Spec.PodSets[0].PodTemplateRef.Name != "t" {
		t.Errorf("the tenant's request of the same name was changed: %+v", pr)
	}
	ev := strings.Join(f.events(), "\n")
	for _, want := range []string{"41 pending members, more than the 40 pods", "more than 32 distinct specs", "ProvisioningRequest podgroup-taken exists and was not made for this PodGroup",
		"ProvisioningRequest tenants-booking books for this PodGroup already"} {
		if !strings.Contains(ev, want) {
			t.Errorf("no event saying %q in\n%s", want, ev)
		}
	}

	// A refusal is counted once per group and reason, however often the
	// group is reconciled.
	refused := testutil.ToFloat64(requestsMade.WithLabelValues("refused"))
	f.reconcile("taken")
	f.reconcile("taken")
	if d := testutil.ToFloat64(requestsMade.WithLabelValues("refused")) - refused; d != 0 {
		t.Errorf("refused rose by %v on reconciling a refused group again, want 0", d)
	}

	// The namespace's limit: 2.
	for _, g := range []string{"a", "b", "c"} {
		if err := f.c.Create(context.Background(), gang(g, 1, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable)); err != nil {
			t.Fatal(err)
		}
		f.member(g+"-0", g, "1")
		f.reconcile(g)
	}
	if f.request("a") == nil || f.request("b") == nil || f.request("c") != nil {
		t.Errorf("requests for a, b, c: %v %v %v; want the first two", f.request("a") != nil, f.request("b") != nil, f.request("c") != nil)
	}
	if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, "the most it may (--max-pod-group-requests-per-namespace)") {
		t.Errorf("no event of the namespace's limit in\n%s", ev)
	}

	// Group a deleted: its request goes.
	if err := f.c.Delete(context.Background(), &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	f.reconcile("a")
	if f.request("a") != nil {
		t.Errorf("the request of a deleted PodGroup is left")
	}
}

// TestRequestName: names fit a DNS subdomain, distinct for distinct long
// groups.
func TestRequestName(t *testing.T) {
	long := strings.Repeat("a", 253)
	other := strings.Repeat("a", 252) + "b"
	for _, g := range []string{"g", long, other} {
		if errs := validation.IsDNS1123Subdomain(RequestName(g)); len(errs) > 0 {
			t.Errorf("%q: %v", RequestName(g), errs)
		}
		if errs := validation.IsDNS1123Subdomain(templateName(RequestName(g), MaxPodSets-1)); len(errs) > 0 {
			t.Errorf("template of %q: %v", RequestName(g), errs)
		}
	}
	if RequestName(long) == RequestName(other) {
		t.Errorf("two long groups share a request name")
	}
}

// TestPodSetsWithoutTokenVolume: members that differ only in the service
// account token volume admission gave each (a random name) are one pod
// set, whose template has neither the volume nor its mount; a volume of
// the member's own stays.
func TestPodSetsWithoutTokenVolume(t *testing.T) {
	member := func(name, token string) *v1.Pod {
		p := wrappers.MakePod(name, "ns").Requests("cpu", "1").PodGroup("g").Obj()
		p.Spec.Volumes = []v1.Volume{
			{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: token, VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}},
		}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: token, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
		return p
	}
	sets, err := podSets([]any{member("g-0", "kube-api-access-abcde"), member("g-1", "kube-api-access-fghij")})
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 1 || sets[0].count != 2 {
		t.Fatalf("%d pod sets (%+v), want one of 2", len(sets), sets)
	}
	spec := sets[0].template.Spec
	if len(spec.Volumes) != 1 || spec.Volumes[0].Name != "data" {
		t.Errorf("template volumes %+v, want data alone", spec.Volumes)
	}
	if m := spec.Containers[0].VolumeMounts; len(m) != 1 || m[0].Name != "data" {
		t.Errorf("template mounts %+v, want data alone", m)
	}
}
