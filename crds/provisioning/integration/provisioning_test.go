//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	"github.com/gantry-dev/gantry/crds/crdtest"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// request is a valid check-capacity request for 4 pods of PodTemplate
// workers.
func request(name string) *provv1.ProvisioningRequest {
	return wrappers.MakeProvisioningRequest(name, "default", provv1.ClassCheckCapacity).PodSet("workers", 4).
		Parameter(provv1.ParameterValidUntilSeconds, "600").Obj()
}

func TestCRDs(t *testing.T) {
	client, _ := crdtest.Start(t)
	ctx := context.Background()
	t.Run("ProvisioningRequest", func(t *testing.T) {
		requests := client.AutoscalingXV1().ProvisioningRequests("default")
		for _, tc := range []struct {
			name    string
			create  func(*provv1.ProvisioningRequest)
			update  func(*provv1.ProvisioningRequest)
			wantErr string
		}{
			{name: "valid"},
			{name: "no pod sets", create: func(r *provv1.ProvisioningRequest) { r.Spec.PodSets = nil },
				wantErr: "spec.podSets"},
			{name: "33 pod sets", create: func(r *provv1.ProvisioningRequest) {
				for range 32 {
					r.Spec.PodSets = append(r.Spec.PodSets, r.Spec.PodSets[0])
				}
			}, wantErr: "spec.podSets: Too many: 33: must have at most 32 items"},
			{name: "zero count", create: func(r *provv1.ProvisioningRequest) { r.Spec.PodSets[0].Count = 0 },
				wantErr: "spec.podSets[0].count: Invalid value: 0: spec.podSets[0].count in body should be greater than or equal to 1"},
			{name: "bad template name", create: func(r *provv1.ProvisioningRequest) { r.Spec.PodSets[0].PodTemplateRef.Name = "Workers_1" },
				wantErr: "spec.podSets[0].podTemplateRef.name"},
			{name: "bad class name", create: func(r *provv1.ProvisioningRequest) { r.Spec.ProvisioningClassName = "Check Capacity" },
				wantErr: "spec.provisioningClassName"},
			{name: "long parameter", create: func(r *provv1.ProvisioningRequest) {
				r.Spec.Parameters["x"] = provv1.Parameter(strings.Repeat("a", 256))
			}, wantErr: "spec.parameters.x: Too long"},
			{name: "count changed", update: func(r *provv1.ProvisioningRequest) { r.Spec.PodSets[0].Count = 5 },
				wantErr: "spec.podSets: Invalid value: Value is immutable"},
			{name: "class changed", update: func(r *provv1.ProvisioningRequest) {
				r.Spec.ProvisioningClassName = provv1.ClassBestEffortAtomicScaleUp
			},
				wantErr: "spec.provisioningClassName: Invalid value: \"best-effort-atomic-scale-up.autoscaling.x-k8s.io\": Value is immutable"},
			{name: "parameters changed", update: func(r *provv1.ProvisioningRequest) { r.Spec.Parameters[provv1.ParameterNoRetry] = "true" },
				wantErr: "spec.parameters: Invalid value: Value is immutable"},
			{name: "labels changed", update: func(r *provv1.ProvisioningRequest) { r.Labels = map[string]string{"team": "ml"} }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := request(strings.ReplaceAll(tc.name, " ", "-"))
				if tc.create != nil {
					tc.create(r)
				}
				created, err := requests.Create(ctx, r, metav1.CreateOptions{})
				if tc.update == nil {
					crdtest.CheckErr(t, "create", err, tc.wantErr)
					return
				}
				if err != nil {
					t.Fatalf("create rejected: %v", err)
				}
				edited := created.DeepCopy()
				tc.update(edited)
				_, err = requests.Update(ctx, edited, metav1.UpdateOptions{})
				crdtest.CheckErr(t, "update", err, tc.wantErr)
			})
		}
		// The status is a subresource: conditions are written there, and a
		// spec write through it is ignored.
		r, err := requests.Get(ctx, "valid", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.Status.Conditions = []metav1.Condition{{Type: provv1.ConditionAccepted, Status: metav1.ConditionTrue,
			Reason: "Accepted", Message: "served by gantry-provisioner", LastTransitionTime: metav1.Now()}}
		r.Status.ProvisioningClassDetails = map[string]provv1.Detail{"nodes": "n1,n2"}
		r.Spec.PodSets[0].Count = 99
		got, err := requests.UpdateStatus(ctx, r, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) != 1 || got.Spec.PodSets[0].Count != 4 {
			t.Errorf("status update: conditions %v, count %d (want 1 condition, count kept at 4)", got.Status.Conditions, got.Spec.PodSets[0].Count)
		}
	})

	t.Run("ProvisioningClass", func(t *testing.T) {
		classes := client.AutoscalingV1alpha1().ProvisioningClasses()
		d := func(s string) *metav1.Duration {
			v, _ := time.ParseDuration(s)
			return &metav1.Duration{Duration: v}
		}
		for _, tc := range []struct {
			name    string
			handler autoscalingv1alpha1.Handler
			edit    func(*autoscalingv1alpha1.ProvisioningClassSpec)
			wantErr string
		}{
			{name: "check", handler: autoscalingv1alpha1.HandlerCheckCapacity},
			{name: "atomic", handler: autoscalingv1alpha1.HandlerAtomicScaleUp, edit: func(s *autoscalingv1alpha1.ProvisioningClassSpec) {
				s.NodeGroups = []string{"a", "b"}
				s.ProvisioningTimeout = d("2m")
				s.Backoff = &autoscalingv1alpha1.Backoff{Initial: d("5s"), Max: d("1m")}
			}},
			{name: "unknown handler", handler: "best-guess", wantErr: `spec.handler: Unsupported value: "best-guess"`},
			{name: "node groups for check", handler: autoscalingv1alpha1.HandlerCheckCapacity, edit: func(s *autoscalingv1alpha1.ProvisioningClassSpec) {
				s.NodeGroups = []string{"a"}
			}, wantErr: "nodeGroups apply to the atomic-scale-up handler only"},
			{name: "zero booking", handler: autoscalingv1alpha1.HandlerCheckCapacity, edit: func(s *autoscalingv1alpha1.ProvisioningClassSpec) {
				s.BookingDuration = d("0s")
			}, wantErr: "spec.bookingDuration: Invalid value: \"0s\": must be positive"},
			{name: "backoff inverted", handler: autoscalingv1alpha1.HandlerAtomicScaleUp, edit: func(s *autoscalingv1alpha1.ProvisioningClassSpec) {
				s.Backoff = &autoscalingv1alpha1.Backoff{Initial: d("2m"), Max: d("1m")}
			}, wantErr: "backoff.initial must not exceed backoff.max"},
			{name: "zero validity", handler: autoscalingv1alpha1.HandlerCheckCapacity, edit: func(s *autoscalingv1alpha1.ProvisioningClassSpec) {
				v := int32(0)
				s.ValidUntilSeconds = &v
			}, wantErr: "spec.validUntilSeconds"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := wrappers.MakeProvisioningClass(strings.ReplaceAll(tc.name, " ", "-"), tc.handler).Obj()
				if tc.edit != nil {
					tc.edit(&c.Spec)
				}
				_, err := classes.Create(ctx, c, metav1.CreateOptions{})
				crdtest.CheckErr(t, "create", err, tc.wantErr)
			})
		}
	})
}
