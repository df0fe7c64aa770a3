package simulator

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/gantry-dev/gantry/test/wrappers"
)

const (
	gpuDriver = "gpu.example.com"
	gpuClass  = "gpu"
)

func gpuDeviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: gpuClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + gpuDriver + `"`}}}}}
}

// gpuSlice publishes devices in a pool of node's own.
func gpuSlice(node string, devices ...string) *resourceapi.ResourceSlice {
	return st.MakeResourceSlice(node, gpuDriver).Devices(devices...).Obj()
}

// oneGPU is a claim (spec) asking for one device of gpuClass.
func oneGPU() *st.ResourceClaimWrapper {
	return st.MakeResourceClaim().Namespace("ns").RequestWithName("gpu", gpuClass)
}

func gpuTemplate(name string) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: oneGPU().Obj().Spec}}
}

// allocatedGPU is a claim holding device of node's pool.
func allocatedGPU(name, node, device string) *resourceapi.ResourceClaim {
	return oneGPU().Name(name).UID(name).Allocation(&resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: gpuDriver, Pool: node, Device: device}}},
		NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}},
	}).Obj()
}

// gpuPod is a 1-CPU pod with claims.
func gpuPod(claims ...v1.PodResourceClaim) *v1.Pod {
	return wrappers.MakePod("tmpl", "ns").Requests("cpu", "1").ResourceClaims(claims...).Obj()
}

func fromTemplate(name string) v1.PodResourceClaim {
	return v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: &name}
}

func byName(name string) v1.PodResourceClaim {
	return v1.PodResourceClaim{Name: "gpu", ResourceClaimName: &name}
}

// The cluster of the DRA tests: n1 publishes gpu-0 (taken by an existing
// claim) and gpu-1, n2 gpu-0, n3 no device; CPU is plenty. Two devices are
// free.
func draCluster() (Cluster, []runtime.Object) {
	c := Cluster{Nodes: []*v1.Node{node("n1", "8"), node("n2", "8"), node("n3", "8")}}
	return c, []runtime.Object{gpuDeviceClass(), gpuSlice("n1", "gpu-0", "gpu-1"), gpuSlice("n2", "gpu-0"),
		gpuTemplate("one-gpu"), allocatedGPU("taken", "n1", "gpu-0"), oneGPU().Name("shared").UID("shared").Obj()}
}

func TestPlaceWithResourceClaims(t *testing.T) {
	// DRAConsumableCapacity (beta, on) decides which tracker method the
	// plugin reads allocated devices from.
	for _, consumable := range []bool{true, false} {
		t.Run(map[bool]string{true: "consumable capacity", false: "no consumable capacity"}[consumable], func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRAConsumableCapacity, consumable)
			testPlaceWithResourceClaims(t)
		})
	}
}

func testPlaceWithResourceClaims(t *testing.T) {
	cluster, objects := draCluster()
	s := newSimulator(t, nil, objects...)
	if slices.Contains(s.Skipped(), names.DynamicResources) {
		t.Fatalf("DynamicResources is skipped: %v", s.Skipped())
	}
	ctx := t.Context()
	pod := gpuPod(fromTemplate("one-gpu"))

	// One pod per free device, on the nodes that have them.
	got, err := s.Place(ctx, cluster, []PodSet{{Name: "w", Pod: pod, Count: 2}})
	if err != nil || strings.Join(got["w"], " ") != "n1 n2" {
		t.Fatalf("two pods: %v, %v; want n1 n2", got, err)
	}
	_, err = s.Place(ctx, cluster, []PodSet{{Name: "w", Pod: pod, Count: 3}})
	var u *Unschedulable
	if !errors.As(err, &u) || u.Placed != 2 || !strings.Contains(u.Reason, "0/3 nodes are available: 3 cannot allocate all claims") {
		t.Fatalf("three pods: %v; want 2 placed and the claims as the reason", err)
	}
	// Each simulation starts from the cluster's claims.
	if _, err := s.Place(ctx, cluster, []PodSet{{Name: "w", Pod: pod, Count: 2}}); err != nil {
		t.Fatalf("the two pods no longer fit: %v", err)
	}

	// A claim shared by name takes one device for all its pods.
	shared := []PodSet{{Name: "shared", Pod: gpuPod(byName("shared")), Count: 3}, {Name: "own", Pod: pod, Count: 1}}
	got, err = s.Place(ctx, cluster, shared)
	if err != nil || strings.Join(got["shared"], " ") != "n1 n1 n1" || strings.Join(got["own"], " ") != "n2" {
		t.Fatalf("shared claim: %v, %v; want its pods on n1, the other on n2", got, err)
	}
	shared[1].Count = 2
	if _, err := s.Place(ctx, cluster, shared); !errors.As(err, &u) || u.PodSet != "own" || u.Placed != 1 {
		t.Fatalf("shared claim and two more devices: %v; want set own to fit one pod", err)
	}
	// A pod with two claims needs two devices on one node.
	two := gpuPod(fromTemplate("one-gpu"), v1.PodResourceClaim{Name: "second", ResourceClaimTemplateName: ptrTo("one-gpu")})
	if _, err := s.Place(ctx, cluster, []PodSet{{Name: "two", Pod: two, Count: 1}}); !errors.As(err, &u) || u.Placed != 0 {
		t.Fatalf("two claims: %v; want no node to fit", err)
	}

	// Devices of the nodes a scale-up adds.
	withNew := cluster
	withNew.NewNodes = []*v1.Node{node("new-0", "8")}
	withNew.ResourceSlices = []*resourceapi.ResourceSlice{gpuSlice("new-0", "gpu-0", "gpu-1")}
	got, err = s.Place(ctx, withNew, []PodSet{{Name: "w", Pod: pod, Count: 4}, {Name: "two", Pod: two, Count: 0}})
	if err != nil || strings.Join(got["w"], " ") != "n1 n2 new-0 new-0" {
		t.Fatalf("with a new node: %v, %v; want n1 n2 new-0 new-0", got, err)
	}
	if _, err := s.Place(ctx, withNew, []PodSet{{Name: "two", Pod: two, Count: 1}}); err != nil {
		t.Fatalf("two claims with a new node: %v", err)
	}
}

func TestPlaceWithMissingClaimObjects(t *testing.T) {
	cluster, objects := draCluster()
	s := newSimulator(t, nil, objects...)
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"template", gpuPod(fromTemplate("missing")), "pod set p: spec.resourceClaims[0] (gpu): ResourceClaimTemplate ns/missing not found"},
		{"claim", gpuPod(byName("gone")), "pod set p: spec.resourceClaims[0] (gpu): ResourceClaim ns/gone not found"},
		{"neither", gpuPod(v1.PodResourceClaim{Name: "gpu"}), "names neither resourceClaimName nor resourceClaimTemplateName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Checked before the first set is placed.
			_, err := s.Place(t.Context(), cluster, []PodSet{{Name: "first", Pod: pod("1"), Count: 1}, {Name: "p", Pod: tc.pod, Count: 1}})
			var invalid *InvalidPodSet
			if !errors.As(err, &invalid) || invalid.PodSet != "p" || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an InvalidPodSet: %s", err, tc.want)
			}
		})
	}
	many := gpuPod()
	for i := range MaxClaimsPerPod + 1 {
		many.Spec.ResourceClaims = append(many.Spec.ResourceClaims, v1.PodResourceClaim{Name: strings.Repeat("c", i+1), ResourceClaimTemplateName: ptrTo("one-gpu")})
	}
	var invalid *InvalidPodSet
	if _, err := s.Place(t.Context(), cluster, []PodSet{{Name: "p", Pod: many, Count: 1}}); !errors.As(err, &invalid) {
		t.Fatalf("%d claims: %v, want an InvalidPodSet", MaxClaimsPerPod+1, err)
	}
}

// Pods without claims leave the resource.k8s.io informers unstarted.
func TestPlaceWithoutClaimsStartsNoDRAInformers(t *testing.T) {
	s := newSimulator(t, nil)
	if _, err := s.Place(t.Context(), Cluster{Nodes: []*v1.Node{node("n1", "4")}}, []PodSet{{Name: "w", Pod: pod("1"), Count: 2}}); err != nil {
		t.Fatal(err)
	}
	if s.informers.synced != nil {
		t.Error("the DRA informers were started for pods without claims")
	}
}

func ptrTo[T any](v T) *T { return &v }

// BenchmarkCheckCapacity1000GPUPodsOn5000Nodes is check-capacity's decision
// for 1000 pods claiming one device each (from a ResourceClaimTemplate) on
// the 5000 nodes of BenchmarkCheckCapacity1000PodsOn5000Nodes, every fifth
// of which publishes one device: the request takes every device.
func BenchmarkCheckCapacity1000GPUPodsOn5000Nodes(b *testing.B) {
	var c Cluster
	objects := []runtime.Object{gpuDeviceClass(), gpuTemplate("one-gpu")}
	for n := range 5000 {
		name := fmt.Sprintf("node-%04d", n)
		c.Nodes = append(c.Nodes, node(name, "8"))
		for i := range 10 {
			c.Pods = append(c.Pods, bound(fmt.Sprintf("p-%d-%d", n, i), name, "700m"))
		}
		if n%5 == 0 {
			objects = append(objects, gpuSlice(name, "gpu-0"))
		}
	}
	s := newSimulator(b, nil, objects...)
	sets := []PodSet{{Name: "workers", Pod: gpuPod(fromTemplate("one-gpu")), Count: 1000}}
	// The first simulation with claims starts the informers.
	if _, err := s.Place(b.Context(), c, sets); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		got, err := s.Place(b.Context(), c, sets)
		if err != nil || len(got["workers"]) != 1000 {
			b.Fatalf("%v", err)
		}
	}
}

// A device with admin access is not taken; a share of a device (consumable
// capacity) takes the share and its capacity, or, without the gate, the
// device.
func TestClaimTrackerTake(t *testing.T) {
	share := types.UID("share-1")
	claim := oneGPU().Name("c").Allocation(&resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: gpuDriver, Pool: "n1", Device: "admin", AdminAccess: ptrTo(true)},
			{Request: "gpu", Driver: gpuDriver, Pool: "n1", Device: "whole"},
			{Request: "gpu", Driver: gpuDriver, Pool: "n1", Device: "shared", ShareID: &share,
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("1Gi")}},
		}}}).Obj()
	id := func(device string) structured.DeviceID { return structured.MakeDeviceID(gpuDriver, "n1", device) }

	consumable := newClaimTracker(nil, true)
	consumable.take(claim)
	state, _ := consumable.GatherAllocatedState()
	if !state.AllocatedDevices.Equal(sets.New(id("whole"))) || !state.AllocatedSharedDeviceIDs.Has(structured.MakeSharedDeviceID(id("shared"), &share)) ||
		len(state.AggregatedCapacity[id("shared")]) != 1 {
		t.Errorf("with consumable capacity: %+v", state)
	}
	whole := newClaimTracker(nil, false)
	whole.take(claim)
	if got, _ := whole.ListAllAllocatedDevices(); !got.Equal(sets.New(id("whole"), id("shared"))) {
		t.Errorf("without consumable capacity: %v", got)
	}
}
