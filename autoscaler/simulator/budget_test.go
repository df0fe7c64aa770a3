package simulator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
)

// shaped is a 1-CPU pod labelled app=x, shaped by f.
func shaped(f func(*st.PodWrapper) *st.PodWrapper) *v1.Pod {
	w := st.MakePod().Namespace("ns").Name("tmpl").Label("app", "x").Req(map[v1.ResourceName]string{v1.ResourceCPU: "1"})
	if f != nil {
		w = f(w)
	}
	return w.Obj()
}

func withHostPort(p *v1.Pod) *v1.Pod {
	p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 8080, HostPort: 8080, Protocol: v1.ProtocolTCP}}
	return p
}

func zonedNode(name, zone, cpu string) *v1.Node {
	return st.MakeNode().Name(name).Label("zone", zone).Label(v1.LabelHostname, name).
		Capacity(map[v1.ResourceName]string{v1.ResourceCPU: cpu, v1.ResourceMemory: "16Gi", v1.ResourcePods: "110"}).Obj()
}

func twoCPUNodes(n int) Cluster {
	var c Cluster
	for i := range n {
		c.Nodes = append(c.Nodes, zonedNode(fmt.Sprintf("n%d", i+1), "a", "2"))
	}
	return c
}

// The budget counts a PreFilter and each Filter run; a pod whose PreFilter
// reads every node counts one per node; past the budget, the simulation
// stops with what it had placed.
func TestPlaceWithinCountsEvaluations(t *testing.T) {
	s := newSimulator(t, nil)
	c := twoCPUNodes(4)
	plain := []PodSet{{Name: "w", Pod: shaped(nil), Count: 8}}
	// Two pods a node, walked once: per pod one PreFilter and one Filter
	// run, plus one for each full node passed (3 nodes fill up).
	b := &Budget{Evaluations: 100}
	if _, err := s.PlaceWithin(t.Context(), c, plain, b); err != nil || b.Used() != 19 {
		t.Fatalf("8 pods on 4 nodes: %v, %d evaluations, want 19", err, b.Used())
	}
	b = &Budget{Evaluations: 18}
	var be *BudgetExceeded
	if _, err := s.PlaceWithin(t.Context(), c, plain, b); !errors.As(err, &be) || be.Placed != 7 || be.Limit != 18 || be.Late {
		t.Fatalf("budget 18: got %v", err)
	}

	// Anti-affinity: 4 nodes' PreFilter per pod, one pod a node.
	anti := shaped(func(w *st.PodWrapper) *st.PodWrapper {
		return w.PodAntiAffinityExists("app", v1.LabelHostname, st.PodAntiAffinityWithRequiredReq)
	})
	b = &Budget{}
	if _, err := s.PlaceWithin(t.Context(), c, []PodSet{{Name: "a", Pod: anti, Count: 4}}, b); err != nil || b.Used() != 4*4+1+2+2+2 {
		t.Fatalf("4 anti-affine pods: %v, %d evaluations, want 23", err, b.Used())
	}
	if !CrossNode(anti) || CrossNode(shaped(nil)) {
		t.Error("CrossNode")
	}
}

// Past the deadline, the simulation stops and says it was late.
func TestPlaceWithinDeadline(t *testing.T) {
	s := newSimulator(t, nil)
	b := &Budget{Deadline: time.Now().Add(-time.Second)}
	var be *BudgetExceeded
	_, err := s.PlaceWithin(t.Context(), twoCPUNodes(2), []PodSet{{Name: "w", Pod: shaped(nil), Count: 2}}, b)
	if !errors.As(err, &be) || !be.Late || be.Placed != 0 {
		t.Fatalf("got %v", err)
	}
	// A budget with time left places them.
	b = &Budget{Deadline: time.Now().Add(time.Minute), Evaluations: 1000}
	if _, err := s.PlaceWithin(t.Context(), twoCPUNodes(2), []PodSet{{Name: "w", Pod: shaped(nil), Count: 2}}, b); err != nil {
		t.Fatal(err)
	}
}

// Only required pod affinity walks the nodes from the first for every pod:
// preferred terms (no Filter reads them) and anti-affinity (placing pods
// only closes nodes) walk them once.
func TestPlaceWithinRestartsOnlyForRequiredAffinity(t *testing.T) {
	s := newSimulator(t, nil)
	c := twoCPUNodes(3)
	cases := []struct {
		name string
		pod  *v1.Pod
		want int64
	}{
		// Six pods on three 2-CPU nodes. Walked once: 1+1+2+1+2+1 Filter
		// runs.
		{"preferred", shaped(func(w *st.PodWrapper) *st.PodWrapper {
			return w.PodAffinityExists("app", "zone", st.PodAffinityWithPreferredReq)
		}), 6 + 8},
		// From the first node each time: 1+1+2+2+3+3; PreFilter 3 each.
		{"required", shaped(func(w *st.PodWrapper) *st.PodWrapper {
			return w.PodAffinityExists("app", "zone", st.PodAffinityWithRequiredReq)
		}), 6*3 + 12},
	}
	for _, tc := range cases {
		b := &Budget{}
		got, err := s.PlaceWithin(t.Context(), c, []PodSet{{Name: "p", Pod: tc.pod, Count: 6}}, b)
		if err != nil || len(got["p"]) != 6 || b.Used() != tc.want {
			t.Errorf("%s: %v %v, %d evaluations, want %d", tc.name, got, err, b.Used(), tc.want)
		}
	}
}

// Simulations run on as many instances at once as asked, give the same
// answers as one after the other, and wait (bounded by ctx) when all are
// busy.
func TestInstances(t *testing.T) {
	s := newSimulatorWith(t, nil, []Option{WithInstances(2)})
	if s.Instances() != 2 {
		t.Fatalf("instances: %d", s.Instances())
	}
	clusters := []Cluster{twoCPUNodes(3), twoCPUNodes(5)}
	want := make([]Placement, len(clusters))
	for i, c := range clusters {
		p, err := s.Place(t.Context(), c, []PodSet{{Name: "w", Pod: shaped(nil), Count: 2 * (i + 3)}})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = p
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 10 {
		for i, c := range clusters {
			wg.Go(func() {
				p, err := s.Place(t.Context(), c, []PodSet{{Name: "w", Pod: shaped(nil), Count: 2 * (i + 3)}})
				if err == nil && fmt.Sprint(p) != fmt.Sprint(want[i]) {
					err = fmt.Errorf("cluster %d: %v, alone %v", i, p, want[i])
				}
				if err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	a, b := <-s.pool, <-s.pool
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Place(ctx, clusters[0], []PodSet{{Name: "w", Pod: shaped(nil), Count: 1}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("with every instance busy: %v", err)
	}
	s.pool <- a
	s.pool <- b
}

// BenchmarkTenantShapes is the cost of one attempt for the pod shapes that
// make a simulation expensive, at 500 and 5000 nodes, with the default
// budget and (at 500 nodes) none: N+1 pods (at most 5000) of which one
// fits a node, so the last does not fit (or the budget runs out first).
// It reports the evaluations counted and the pods placed.
//
//	go test ./autoscaler/simulator -run '^$' -bench TenantShapes -benchtime 1x -count 3
func BenchmarkTenantShapes(b *testing.B) {
	spread := func(w *st.PodWrapper) *st.PodWrapper {
		return w.SpreadConstraint(1, "zone", v1.DoNotSchedule, st.MakeLabelSelector().Exists("app").Obj(), nil, nil, nil, nil)
	}
	shapes := []struct {
		name string
		pod  func() *v1.Pod
		dra  bool
	}{
		{"PreferredAffinityHostPort", func() *v1.Pod {
			return withHostPort(shaped(func(w *st.PodWrapper) *st.PodWrapper {
				return w.PodAffinityExists("app", "zone", st.PodAffinityWithPreferredReq)
			}))
		}, false},
		{"RequiredAntiAffinity", func() *v1.Pod {
			return shaped(func(w *st.PodWrapper) *st.PodWrapper {
				return w.PodAntiAffinityExists("app", v1.LabelHostname, st.PodAntiAffinityWithRequiredReq)
			})
		}, false},
		{"ZoneSpreadHostPort", func() *v1.Pod { return withHostPort(shaped(spread)) }, false},
		{"DRA", func() *v1.Pod { return gpuPod(fromTemplate("one-gpu")) }, true},
	}
	for _, nodes := range []int{500, 5000} {
		var c Cluster
		objects := []runtime.Object{gpuDeviceClass(), gpuTemplate("one-gpu")}
		for n := range nodes {
			name := fmt.Sprintf("node-%04d", n)
			// Ten zones, in blocks of nodes: spread walks far.
			c.Nodes = append(c.Nodes, zonedNode(name, fmt.Sprintf("zone-%d", n*10/nodes), "8"))
			objects = append(objects, gpuSlice(name, "gpu-0"))
		}
		s := newSimulator(b, nil, objects...)
		for _, shape := range shapes {
			for _, limit := range []int64{DefaultEvaluations, 0} {
				if limit == 0 && nodes > 500 {
					continue // minutes a run
				}
				name := fmt.Sprintf("%s/Nodes%d/Budget%s", shape.name, nodes, map[bool]string{true: "Default", false: "Unbounded"}[limit > 0])
				b.Run(name, func(b *testing.B) {
					sets := []PodSet{{Name: "p", Pod: shape.pod(), Count: min(nodes+1, 5000)}}
					var used int64
					var placed int
					for range b.N {
						budget := &Budget{Evaluations: limit}
						_, err := s.PlaceWithin(b.Context(), c, sets, budget)
						var u *Unschedulable
						var be *BudgetExceeded
						switch {
						case errors.As(err, &u):
							placed = u.Placed
						case errors.As(err, &be):
							placed = be.Placed
						case err != nil:
							b.Fatal(err)
						default:
							placed = sets[0].Count
						}
						used = budget.Used()
					}
					b.ReportMetric(float64(used), "evaluations/op")
					b.ReportMetric(float64(placed), "placed/op")
					if used > 0 {
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(used), "ns/evaluation")
					}
				})
			}
		}
	}
}
