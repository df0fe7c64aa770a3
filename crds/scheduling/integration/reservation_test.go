//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	restclient "k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	typedv1alpha1 "github.com/gantry-dev/gantry/crds/client/clientset/versioned/typed/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/crds/crdtest"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// reservation is a valid Reservation: one pod owner, two requests.
func reservation(name string) *schedv1alpha1.Reservation {
	return wrappers.MakeReservation(name, "cpu", "500m", "memory", "1Gi").OwnerPod("default", "web-0").Obj()
}

func podRef(name string) *schedv1alpha1.OwnerReference {
	return &schedv1alpha1.OwnerReference{Namespace: "default", Name: name}
}

// TestReservation runs its checks on one control plane: starting one takes
// longer than all of them.
func TestReservation(t *testing.T) {
	client, _ := crdtest.Start(t)
	t.Run("validation", func(t *testing.T) { testValidation(t, client.SchedulingV1alpha1().Reservations()) })
	t.Run("integer requests", func(t *testing.T) { testIntegerRequests(t, client.SchedulingV1alpha1().RESTClient()) })
	t.Run("status subresource", func(t *testing.T) { testStatusSubresource(t, client.SchedulingV1alpha1().Reservations()) })
}

func testValidation(t *testing.T, reservations typedv1alpha1.ReservationInterface) {
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		// create edits a valid reservation before it is created.
		create func(r *schedv1alpha1.Reservation)
		// update, when set, edits the created reservation, which is then
		// updated; wantErr is then about the update.
		update func(r *schedv1alpha1.Reservation)
		// wantErr is a substring of the 422 Invalid error; "" accepts.
		wantErr string
	}{
		{name: "valid"},
		{name: "valid with ttl and a label selector owner",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.TTL = &metav1.Duration{Duration: 10 * time.Minute}
				r.Spec.Owners = append(r.Spec.Owners, schedv1alpha1.ReservationOwner{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Namespace: "default"})
			}},
		// The typed client sends a nil slice as null, which the API server
		// drops (owners is not nullable): owners is missing.
		{name: "owners missing",
			create:  func(r *schedv1alpha1.Reservation) { r.Spec.Owners = nil },
			wantErr: "spec.owners: Required value"},
		{name: "owners empty",
			create:  func(r *schedv1alpha1.Reservation) { r.Spec.Owners = []schedv1alpha1.ReservationOwner{} },
			wantErr: "spec.owners: Invalid value: 0: spec.owners in body should have at least 1 items"},
		{name: "requests absent",
			create:  func(r *schedv1alpha1.Reservation) { r.Spec.Template.Requests = nil },
			wantErr: "spec.template.requests: Required value"},
		{name: "requests empty",
			create:  func(r *schedv1alpha1.Reservation) { r.Spec.Template.Requests = v1.ResourceList{} },
			wantErr: "spec.template.requests: Invalid value: 0: spec.template.requests in body should have at least 1 properties"},
		{name: "negative request",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Template.Requests[v1.ResourceCPU] = resource.MustParse("-1")
			},
			wantErr: "spec.template.requests: Invalid value: requests must not be negative"},
		{name: "both ttl and expires",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.TTL = &metav1.Duration{Duration: time.Hour}
				r.Spec.Expires = &metav1.Time{Time: time.Now().Add(time.Hour)}
			},
			wantErr: "spec: Invalid value: set at most one of ttl and expires"},
		{name: "owner with object and controller",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners[0].Controller = &schedv1alpha1.OwnerReference{
					APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "default", Name: "web"}
			},
			wantErr: "spec.owners[0]: Invalid value: set exactly one of object, controller, labelSelector, annotation and podGroup"},
		{name: "owner with object and labelSelector",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners = append(r.Spec.Owners, schedv1alpha1.ReservationOwner{
					Object:        podRef("web-1"),
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Namespace: "default"})
			},
			wantErr: "spec.owners[1]: Invalid value: set exactly one of object, controller, labelSelector, annotation and podGroup"},
		{name: "labelSelector without namespace",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners = []schedv1alpha1.ReservationOwner{
					{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
			},
			wantErr: "spec.owners[0]: Invalid value: labelSelector, annotation and podGroup need a namespace"},
		{name: "annotation without namespace",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners = []schedv1alpha1.ReservationOwner{
					{Annotation: &schedv1alpha1.OwnerAnnotation{Key: "autoscaling.x-k8s.io/consume-provisioning-request", Value: "req"}}}
			},
			wantErr: "spec.owners[0]: Invalid value: labelSelector, annotation and podGroup need a namespace"},
		{name: "podGroup without namespace",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners = []schedv1alpha1.ReservationOwner{{PodGroup: "gang"}}
			},
			wantErr: "spec.owners[0]: Invalid value: labelSelector, annotation and podGroup need a namespace"},
		{name: "podGroup and annotation",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners = []schedv1alpha1.ReservationOwner{{PodGroup: "gang", Namespace: "default",
					Annotation: &schedv1alpha1.OwnerAnnotation{Key: "autoscaling.x-k8s.io/consume-provisioning-request", Value: "req"}}}
			},
			wantErr: "spec.owners[0]: Invalid value: set exactly one of object, controller, labelSelector, annotation and podGroup"},
		{name: "podGroup not a DNS subdomain",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners = []schedv1alpha1.ReservationOwner{{PodGroup: "Gang_1", Namespace: "default"}}
			},
			wantErr: "spec.owners[0].podGroup: Invalid value: \"Gang_1\": spec.owners[0].podGroup in body should match"},
		{name: "podGroup",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners = []schedv1alpha1.ReservationOwner{{PodGroup: "gang.a-1", Namespace: "default"}}
			}},
		{name: "annotation with an empty key",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners = []schedv1alpha1.ReservationOwner{
					{Annotation: &schedv1alpha1.OwnerAnnotation{Value: "req"}, Namespace: "default"}}
			},
			wantErr: "spec.owners[0].annotation.key"},
		{name: "highest user priority may preempt",
			create: func(r *schedv1alpha1.Reservation) { r.Spec.Template.Priority = ptr.To[int32](1000000000) }},
		{name: "system priority may not preempt",
			create:  func(r *schedv1alpha1.Reservation) { r.Spec.Template.Priority = ptr.To[int32](2000001000) },
			wantErr: "spec.template: Invalid value: priority above 1000000000 (a system priority) needs preemptionPolicy Never"},
		{name: "system priority preempting lower explicitly",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Template.Priority = ptr.To[int32](1000000001)
				r.Spec.Template.PreemptionPolicy = ptr.To(v1.PreemptLowerPriority)
			},
			wantErr: "spec.template: Invalid value: priority above 1000000000 (a system priority) needs preemptionPolicy Never"},
		{name: "system priority that never preempts",
			create: func(r *schedv1alpha1.Reservation) {
				r.Spec.Template.Priority = ptr.To[int32](2147483647)
				r.Spec.Template.PreemptionPolicy = ptr.To(v1.PreemptNever)
			}},
		{name: "template changed after create",
			update: func(r *schedv1alpha1.Reservation) {
				r.Spec.Template.Requests[v1.ResourceCPU] = resource.MustParse("2")
			},
			wantErr: "spec.template: Invalid value: template is immutable"},
		{name: "template node selector added after create",
			update: func(r *schedv1alpha1.Reservation) {
				r.Spec.Template.NodeSelector = map[string]string{"zone": "a"}
			},
			wantErr: "spec.template: Invalid value: template is immutable"},
		{name: "owners and ttl changed after create",
			update: func(r *schedv1alpha1.Reservation) {
				r.Spec.Owners[0].Object.Name = "web-1"
				r.Spec.TTL = &metav1.Duration{Duration: time.Hour}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := reservation(strings.ToLower(strings.ReplaceAll(tc.name, " ", "-")))
			if tc.create != nil {
				tc.create(r)
			}
			created, err := reservations.Create(ctx, r, metav1.CreateOptions{})
			if tc.update == nil {
				crdtest.CheckErr(t, "create", err, tc.wantErr)
				if err == nil {
					checkDefaults(t, created)
				}
				return
			}
			if err != nil {
				t.Fatalf("create rejected: %v", err)
			}
			edited := created.DeepCopy()
			tc.update(edited)
			_, err = reservations.Update(ctx, edited, metav1.UpdateOptions{})
			crdtest.CheckErr(t, "update", err, tc.wantErr)
			if err != nil {
				// Nothing of a rejected update is stored.
				stored, gerr := reservations.Get(ctx, r.Name, metav1.GetOptions{})
				if gerr != nil {
					t.Fatal(gerr)
				}
				if stored.ResourceVersion != created.ResourceVersion {
					t.Errorf("rejected update changed the stored reservation (resourceVersion %s -> %s)", created.ResourceVersion, stored.ResourceVersion)
				}
			}
		})
	}
}

func checkDefaults(t *testing.T, r *schedv1alpha1.Reservation) {
	t.Helper()
	if r.Spec.AllocateOnce == nil || !*r.Spec.AllocateOnce {
		t.Errorf("spec.allocateOnce = %v, want the default true", r.Spec.AllocateOnce)
	}
	if got, want := r.Spec.Template.SchedulerName, v1.DefaultSchedulerName; got != want {
		t.Errorf("spec.template.schedulerName = %q, want the default %q", got, want)
	}
}

// testIntegerRequests sends requests as JSON integers, which a resource list
// admits (a quantity is an int-or-string) but the typed client never sends.
func testIntegerRequests(t *testing.T, rest restclient.Interface) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		requests string
		wantErr  string
	}{
		{name: "integer-requests", requests: `{"cpu": 2, "memory": 1073741824}`},
		{name: "negative-integer-request", requests: `{"cpu": -1, "memory": "1Gi"}`,
			wantErr: "spec.template.requests: Invalid value: requests must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"apiVersion": "scheduling.gantry.dev/v1alpha1", "kind": "Reservation",
				"metadata": {"name": "` + tc.name + `"},
				"spec": {"template": {"requests": ` + tc.requests + `},
					"owners": [{"object": {"namespace": "default", "name": "web-0"}}]}}`
			created := &schedv1alpha1.Reservation{}
			err := rest.Post().Resource("reservations").SetHeader("Content-Type", "application/json").
				Body([]byte(body)).Do(ctx).Into(created)
			crdtest.CheckErr(t, "create", err, tc.wantErr)
			if err == nil && created.Spec.Template.Requests.Cpu().Cmp(resource.MustParse("2")) != 0 {
				t.Errorf("stored cpu request %v, want 2", created.Spec.Template.Requests.Cpu())
			}
		})
	}
}

func testStatusSubresource(t *testing.T, reservations typedv1alpha1.ReservationInterface) {
	ctx := context.Background()

	r := reservation("status")
	r.Status.Phase = schedv1alpha1.ReservationAvailable
	created, err := reservations.Create(ctx, r, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Status.Phase != "" {
		t.Errorf("create stored status.phase %q; the status subresource should drop it", created.Status.Phase)
	}

	// UpdateStatus writes status, and only status.
	withStatus := created.DeepCopy()
	withStatus.Status = schedv1alpha1.ReservationStatus{
		Phase:       schedv1alpha1.ReservationAvailable,
		NodeName:    "node-a",
		Allocatable: created.Spec.Template.Requests,
		Conditions: []metav1.Condition{{
			Type: schedv1alpha1.ConditionScheduled, Status: metav1.ConditionTrue,
			Reason: schedv1alpha1.ReasonScheduled, LastTransitionTime: metav1.Now(),
		}},
	}
	withStatus.Spec.Owners[0].Object = podRef("web-1")
	afterStatus, err := reservations.UpdateStatus(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("UpdateStatus: %v", err)
	}
	if afterStatus.Status.Phase != schedv1alpha1.ReservationAvailable || afterStatus.Status.NodeName != "node-a" ||
		len(afterStatus.Status.Conditions) != 1 || afterStatus.Status.Allocatable.Cpu().Cmp(resource.MustParse("500m")) != 0 {
		t.Errorf("UpdateStatus did not store the status: got %+v", afterStatus.Status)
	}
	if got := afterStatus.Spec.Owners[0].Object.Name; got != "web-0" {
		t.Errorf("UpdateStatus changed spec.owners[0].object.name to %q", got)
	}

	// A plain update writes spec and metadata, never status.
	edited := afterStatus.DeepCopy()
	edited.Labels = map[string]string{"edited": "true"}
	edited.Status.Phase = schedv1alpha1.ReservationFailed
	edited.Status.NodeName = "node-b"
	afterUpdate, err := reservations.Update(ctx, edited, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	stored, err := reservations.Get(ctx, r.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string]*schedv1alpha1.Reservation{"Update's response": afterUpdate, "the stored object": stored} {
		if got.Labels["edited"] != "true" {
			t.Errorf("%s lacks the label the update set", what)
		}
		if got.Status.Phase != schedv1alpha1.ReservationAvailable || got.Status.NodeName != "node-a" {
			t.Errorf("a plain update changed status: %s has phase %q on %q, want %q on node-a",
				what, got.Status.Phase, got.Status.NodeName, schedv1alpha1.ReservationAvailable)
		}
	}
}
