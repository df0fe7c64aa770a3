package invariants

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// schedView is the scheduler's view of node: cached pods, and nominated
// ones.
func schedView(node string, cached []frameworkext.NodeViewPod, nominated ...frameworkext.NodeViewPod) frameworkext.NodeView {
	return frameworkext.NodeView{Name: node, Pods: cached, Nominated: nominated}
}

func viewPod(p *v1.Pod) frameworkext.NodeViewPod {
	return frameworkext.NodeViewPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

// reservePod is a Reservation as the scheduler's view shows it: no
// namespace, the Reservation's name and UID.
func reservePod(r *schedv1alpha1.Reservation) frameworkext.NodeViewPod {
	return frameworkext.NodeViewPod{Name: r.Name, UID: r.UID}
}

func TestPreemptorStuck(t *testing.T) {
	const ns = "team"
	nominated := func(node string) *v1.Pod { return pod(ns, "p", "1", "").NominatedNodeName(node).Obj() }
	nominatedHigh := func(node string) *v1.Pod {
		return pod(ns, "p", "1", "").NominatedNodeName(node).Priority(1000).Obj()
	}
	// victim is a pod of priority 0 on n1, terminating or not.
	victim := func(terminating bool) *v1.Pod {
		v := pod(ns, "v", "1", "n1").Obj()
		if terminating {
			v.DeletionTimestamp = &metav1.Time{Time: at(30 * time.Second)}
		}
		return v
	}
	deleting := pod(ns, "p", "1", "").NominatedNodeName("n1").Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: at(0)}
	// The defaults give a preemption 75s: timeout 30s, backoff 10s,
	// victims leaving 5s, grace 30s.
	const limit = 75 * time.Second
	cases := map[string]struct {
		cfg   func(*Config)
		steps []step
		want  []want
	}{
		"nominated within the limit": {
			steps: []step{{0, []any{node("n1", "4"), nominated("n1")}}, {limit, []any{node("n1", "4"), nominated("n1")}}},
		},
		"nominated past the limit": {
			steps: []step{{0, []any{node("n1", "4"), nominated("n1")}}, {limit + time.Second, []any{node("n1", "4"), nominated("n1")}}},
			want: []want{{InvariantPreemptorStuck, []string{"Pod team/p (uid uid-p) has been nominated to Node n1 since 2026-03-01T12:00:00Z (as first seen)",
				"at 2026-03-01T12:01:16Z is still neither bound nor rid of the nomination", "within 1m15s", "by 2026-03-01T12:01:15Z: 1s past the limit"}}},
		},
		"bound where it was nominated": {
			steps: []step{{0, []any{nominated("n1")}}, {time.Hour, []any{pod(ns, "p", "1", "n1").NominatedNodeName("n1").Obj()}}},
		},
		"nominated elsewhere: the clock starts again": {
			steps: []step{{0, []any{nominated("n1")}}, {time.Minute, []any{nominated("n2")}}, {time.Minute + limit, []any{nominated("n2")}}},
		},
		"nominated elsewhere, and there past the limit": {
			steps: []step{{0, []any{nominated("n1")}}, {time.Minute, []any{nominated("n2")}}, {time.Minute + limit + time.Second, []any{nominated("n2")}}},
			want:  []want{{InvariantPreemptorStuck, []string{"nominated to Node n2 since 2026-03-01T12:01:00Z"}}},
		},
		"the nomination cleared between": {
			steps: []step{{0, []any{nominated("n1")}}, {time.Minute, []any{pod(ns, "p", "1", "").Obj()}}, {time.Minute + limit, []any{nominated("n1")}}},
		},
		"waiting for a victim that terminates: the clock starts once it is gone": {
			steps: []step{
				{0, []any{node("n1", "4"), nominatedHigh("n1"), victim(true)}},
				{time.Hour, []any{node("n1", "4"), nominatedHigh("n1"), victim(true)}},
				{time.Hour + limit, []any{node("n1", "4"), nominatedHigh("n1")}},
			},
		},
		"past the limit after the terminating victim is gone": {
			steps: []step{
				{0, []any{node("n1", "4"), nominatedHigh("n1"), victim(true)}},
				{time.Hour, []any{node("n1", "4"), nominatedHigh("n1")}},
				{time.Hour + limit + time.Second, []any{node("n1", "4"), nominatedHigh("n1")}},
			},
			want: []want{{InvariantPreemptorStuck, []string{"nominated to Node n1 since 2026-03-01T13:00:00Z"}}},
		},
		"a victim not terminating does not hold the clock": {
			steps: []step{{0, []any{node("n1", "4"), nominatedHigh("n1"), victim(false)}}, {limit + time.Second, []any{node("n1", "4"), nominatedHigh("n1"), victim(false)}}},
			want:  []want{{InvariantPreemptorStuck, []string{"nominated to Node n1 since 2026-03-01T12:00:00Z"}}},
		},
		"a terminating pod of equal priority does not hold the clock": {
			steps: []step{{0, []any{node("n1", "4"), nominated("n1"), victim(true)}}, {limit + time.Second, []any{node("n1", "4"), nominated("n1"), victim(true)}}},
			want:  []want{{InvariantPreemptorStuck, []string{"nominated to Node n1 since 2026-03-01T12:00:00Z"}}},
		},
		"gated": {
			steps: []step{{0, []any{pod(ns, "p", "1", "").NominatedNodeName("n1").Gated("g").Obj()}}, {time.Hour, []any{pod(ns, "p", "1", "").NominatedNodeName("n1").Gated("g").Obj()}}},
		},
		"being deleted": {
			steps: []step{{0, []any{deleting}}, {time.Hour, []any{deleting}}},
		},
		"not judged": {
			cfg:   func(c *Config) { c.PreemptionLimit = 0 },
			steps: []step{{0, []any{nominated("n1")}}, {time.Hour, []any{nominated("n1")}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			run(t, cfg, tc.steps, tc.want)
		})
	}
}

func TestSchedulerView(t *testing.T) {
	const ns = "team"
	waiting := pod(ns, "p", "1", "").NominatedNodeName("n1").Obj()
	gone := pod(ns, "gone", "1", "").Obj()
	bound := pod(ns, "b", "1", "n1").Obj()
	pending := rsv("r1", "1", 0).Obj()
	available := rsv("r1", "1", 0).Available("n1").Obj()
	failed := rsv("r1", "1", 0).Available("n1").Phase(schedv1alpha1.ReservationFailed).Obj()
	// twice is the objects, and node n1, at t0 and d later.
	twice := func(d time.Duration, objs ...any) []step {
		objs = append(objs, node("n1", "4"))
		return []step{{0, objs}, {d, objs}}
	}
	cases := map[string]struct {
		steps []step
		want  []want
	}{
		"a nominated pod that exists": {
			steps: twice(time.Minute, waiting, schedView("n1", nil, viewPod(waiting))),
		},
		"a nominated pod gone, within grace": {
			steps: twice(30*time.Second, schedView("n1", nil, viewPod(gone))),
		},
		"a nominated pod gone, past grace": {
			steps: twice(31*time.Second, schedView("n1", nil, viewPod(gone))),
			want: []want{{InvariantNominationOfGonePod, []string{"the scheduler still holds Pod team/gone (uid uid-gone) nominated to Node n1 at 2026-03-01T12:00:31Z",
				"the pod is gone from the API, as first seen at 2026-03-01T12:00:00Z", "by 2026-03-01T12:00:30Z (grace 30s): 1s past the limit"}}},
		},
		"a nominated pod gone, while the view is not read": {
			steps: []step{{0, []any{schedView("n1", nil, viewPod(gone))}}, {time.Hour, []any{}}},
		},
		"a nominated pending reservation": {
			steps: twice(time.Hour, pending, schedView("n1", nil, reservePod(pending))),
		},
		"a nominated reservation that is no longer pending": {
			steps: twice(31*time.Second, available, schedView("n1", []frameworkext.NodeViewPod{reservePod(available)}, reservePod(available))),
			want: []want{{InvariantNominationOfGonePod, []string{"holds Reservation r1 (uid uid-r1) nominated to Node n1",
				"the Reservation is Available, no longer Pending"}}},
		},
		"a nominated reservation gone": {
			steps: twice(31*time.Second, schedView("n1", nil, reservePod(pending))),
			want:  []want{{InvariantNominationOfGonePod, []string{"holds Reservation r1 (uid uid-r1) nominated to Node n1", "the Reservation is gone from the API"}}},
		},
		"cached pods that exist": {
			steps: twice(time.Hour, bound, available, schedView("n1", []frameworkext.NodeViewPod{viewPod(bound), reservePod(available)})),
		},
		"a pending reservation's pod, assumed": {
			steps: twice(time.Hour, pending, schedView("n1", []frameworkext.NodeViewPod{reservePod(pending)})),
		},
		"a cached pod gone, within grace": {
			steps: twice(30*time.Second, schedView("n1", []frameworkext.NodeViewPod{viewPod(bound)})),
		},
		"a cached pod gone, past grace": {
			steps: twice(31*time.Second, schedView("n1", []frameworkext.NodeViewPod{viewPod(bound)})),
			want: []want{{InvariantCachedPodGone, []string{"the scheduler still holds Pod team/b (uid uid-b) in its cache on Node n1 at 2026-03-01T12:00:31Z",
				"the pod is gone from the API, as first seen at 2026-03-01T12:00:00Z", "1s past the limit"}}},
		},
		"a failed reservation's pod, cached": {
			steps: twice(31*time.Second, failed, schedView("n1", []frameworkext.NodeViewPod{reservePod(failed)})),
			want:  []want{{InvariantCachedPodGone, []string{"holds Reservation r1 (uid uid-r1) in its cache on Node n1", "the Reservation is Failed"}}},
		},
		"a gone reservation's pod, cached": {
			steps: twice(31*time.Second, schedView("n1", []frameworkext.NodeViewPod{reservePod(available)})),
			want:  []want{{InvariantCachedPodGone, []string{"holds Reservation r1 (uid uid-r1) in its cache", "the Reservation is gone from the API"}}},
		},
		"gone, back within grace, gone again": {
			steps: []step{
				{0, []any{schedView("n1", []frameworkext.NodeViewPod{viewPod(bound)})}},
				{20 * time.Second, []any{bound, schedView("n1", []frameworkext.NodeViewPod{viewPod(bound)})}},
				{40 * time.Second, []any{schedView("n1", []frameworkext.NodeViewPod{viewPod(bound)})}},
				{70 * time.Second, []any{schedView("n1", []frameworkext.NodeViewPod{viewPod(bound)})}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run(t, DefaultConfig(), tc.steps, tc.want)
		})
	}
}

func TestPreemptionChecks(t *testing.T) {
	c := NewChecker(DefaultConfig())
	waiting := pod("team", "p", "1", "").NominatedNodeName("n1").Obj()
	bound := pod("team", "b", "1", "n1").Obj()
	// One nominated pod, one nomination and one cached pod of the view.
	c.Check(snapshot(step{0, []any{waiting, bound, schedView("n1", []frameworkext.NodeViewPod{viewPod(bound)}, viewPod(waiting))}}))
	// Without the view: the nominated pod only.
	c.Check(snapshot(step{time.Second, []any{waiting, bound}}))
	if got := c.Checks()[FamilyPreemption]; got != 4 {
		t.Errorf("%d Preemption checks made, want 4 (%s)", got, c.Checks())
	}
}
