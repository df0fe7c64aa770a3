// Package nodes makes the kwok fake nodes of a Gantry cluster: a small,
// deterministic topology of zones and instance types that features can
// target (zone spreading, instance-type affinity, capacity that fills up).
package nodes

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups/kwok"
)

const (
	// ManagedLabel marks the nodes this package makes.
	ManagedLabel = "gantry.dev/kwok-node"
	// Region is the region label value of every node.
	Region = "gantry-region-1"
	// NamePrefix starts every node name.
	NamePrefix = "kwok-node-"
	// PodsPerNode is each node's pod capacity, as a kubelet's default.
	PodsPerNode = 110
)

// Zones are the zones nodes are spread over, round robin.
var Zones = []string{"zone-a", "zone-b", "zone-c"}

// InstanceType is a node shape.
type InstanceType struct {
	Name   string
	CPU    string
	Memory string
}

// InstanceTypes are the shapes nodes cycle through, so that every
// zone/instance-type pair exists once there are nine nodes or more.
var InstanceTypes = []InstanceType{
	{Name: "gantry.standard-4", CPU: "4", Memory: "16Gi"},
	{Name: "gantry.standard-8", CPU: "8", Memory: "32Gi"},
	{Name: "gantry.highmem-8", CPU: "8", Memory: "64Gi"},
}

// Topology returns the n nodes of a cluster. Node i is in zone i mod 3 and of
// instance type (i/3) mod 3.
func Topology(n int) []*v1.Node {
	out := make([]*v1.Node, 0, n)
	for i := range n {
		zone := Zones[i%len(Zones)]
		it := InstanceTypes[(i/len(Zones))%len(InstanceTypes)]
		name := fmt.Sprintf("%s%d", NamePrefix, i)
		resources := v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse(it.CPU),
			v1.ResourceMemory: resource.MustParse(it.Memory),
			v1.ResourcePods:   *resource.NewQuantity(PodsPerNode, resource.DecimalSI),
		}
		out = append(out, &v1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: name,
				Labels: map[string]string{
					ManagedLabel:                        "true",
					"type":                              "kwok",
					v1.LabelHostname:                    name,
					v1.LabelOSStable:                    "linux",
					v1.LabelArchStable:                  "amd64",
					v1.LabelTopologyRegion:              Region,
					v1.LabelTopologyZone:                zone,
					v1.LabelInstanceTypeStable:          it.Name,
					"node-role.kubernetes.io/kwok-node": "",
				},
				Annotations: map[string]string{
					kwok.KwokAnnotation:            "fake",
					"node.alpha.kubernetes.io/ttl": "0",
				},
			},
			Status: v1.NodeStatus{
				Capacity:    resources,
				Allocatable: resources.DeepCopy(),
			},
		})
	}
	return out
}

// Ensure creates the nodes that do not exist yet and returns how many it
// created. Existing nodes are left as they are.
func Ensure(ctx context.Context, client kubernetes.Interface, want []*v1.Node) (int, error) {
	existing, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, fmt.Errorf("listing nodes: %w", err)
	}
	have := make(map[string]bool, len(existing.Items))
	for _, n := range existing.Items {
		have[n.Name] = true
	}
	todo := make(chan *v1.Node)
	var (
		mu      sync.Mutex
		created int
		errs    []error
		wg      sync.WaitGroup
	)
	for range 16 {
		wg.Go(func() {
			for n := range todo {
				_, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{FieldManager: "gantry-cluster"})
				mu.Lock()
				switch {
				case err == nil:
					created++
				case apierrors.IsAlreadyExists(err):
				default:
					errs = append(errs, fmt.Errorf("creating node %s: %w", n.Name, err))
				}
				mu.Unlock()
			}
		})
	}
	for _, n := range want {
		if !have[n.Name] {
			todo <- n
		}
	}
	close(todo)
	wg.Wait()
	if len(errs) > 0 {
		return created, fmt.Errorf("%d of the nodes could not be created, first: %w", len(errs), errs[0])
	}
	return created, nil
}

// WaitReady waits until at least n managed nodes report Ready.
func WaitReady(ctx context.Context, client kubernetes.Interface, n int, timeout time.Duration) error {
	var ready, total int
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: ManagedLabel + "=true"})
		if err != nil {
			return false, nil
		}
		ready, total = 0, len(list.Items)
		for i := range list.Items {
			if IsReady(&list.Items[i]) {
				ready++
			}
		}
		return ready >= n, nil
	})
	if err != nil {
		return &notReadyError{ready: ready, total: total, want: n, timeout: timeout}
	}
	return nil
}

type notReadyError struct {
	ready, total, want int
	timeout            time.Duration
}

func (e *notReadyError) Error() string {
	return fmt.Sprintf("kwok-controller: only %d of %d nodes Ready after %s (want %d); kwok marks nodes Ready, so check its log",
		e.ready, e.total, e.timeout, e.want)
}

// Component names the component responsible for node readiness.
func (e *notReadyError) Component() string { return "kwok-controller" }

// IsReady reports whether the node's Ready condition is True.
func IsReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
