package invariants

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gantry-dev/gantry/test/wrappers"
)

// replica is a pod of the webhook, Ready since t0+readyAt (never when
// readyAt is negative), whose container last ended at t0+endedAt (never
// when endedAt is negative).
func replica(name string, readyAt, endedAt time.Duration) *v1.Pod {
	w := wrappers.MakePod(name, "gantry-system").UID("uid-"+name).Label("app", "webhook").Phase(v1.PodRunning)
	status := v1.ConditionFalse
	if readyAt >= 0 {
		status = v1.ConditionTrue
	}
	w.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: status, LastTransitionTime: mtime(max(readyAt, 0))}}
	cs := v1.ContainerStatus{Name: "webhook"}
	if endedAt >= 0 {
		cs.LastTerminationState.Terminated = &v1.ContainerStateTerminated{ExitCode: 137, FinishedAt: mtime(endedAt)}
	}
	w.Status.ContainerStatuses = []v1.ContainerStatus{cs}
	return w.Obj()
}

func refusal(d time.Duration) Refusal {
	return Refusal{At: at(d), Verb: "create", Object: ObjectRef{Kind: "Pod", Namespace: "team", Name: "p"},
		Message: `Internal error occurred: failed calling webhook "mutate.gantry.dev": connect: connection refused`}
}

func TestWebhookRefusals(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WebhookNamespace, cfg.WebhookSelector = "gantry-system", labels.SelectorFromSet(labels.Set{"app": "webhook"})
	// The defaults: failover 10s, a refusal judged 5s (Skew) after it.
	n := never()
	cases := map[string]struct {
		steps []step
		want  []want
	}{
		"refused while a replica served and none had ended": {
			steps: []step{
				{at: 60 * time.Second, objs: []any{replica("a", 0, n), replica("b", 0, n), refusal(58 * time.Second)}},
				{at: 65 * time.Second, objs: []any{replica("a", 0, n), replica("b", 0, n)}},
			},
			want: []want{{InvariantRefusedWhileWebhookReady, []string{"the create of Pod team/p was refused at 2026-03-01T12:00:58Z",
				"Pod gantry-system/a (uid uid-a) (Ready since 2026-03-01T12:00:00Z), Pod gantry-system/b", "mutate.gantry.dev"}}},
		},
		"refused 3s after a replica ended, the other serving": {
			steps: []step{
				{at: 60 * time.Second, objs: []any{replica("a", -1, 55*time.Second), replica("b", 0, n), refusal(58 * time.Second)}},
				{at: 65 * time.Second, objs: []any{replica("a", 62*time.Second, 55*time.Second), replica("b", 0, n)}},
			},
		},
		"refused 12s after a replica ended, the other serving": {
			steps: []step{
				{at: 70 * time.Second, objs: []any{replica("a", 60*time.Second, 55*time.Second), replica("b", 0, n), refusal(67 * time.Second)}},
				{at: 75 * time.Second, objs: []any{replica("a", 60*time.Second, 55*time.Second), replica("b", 0, n)}},
			},
			want: []want{{InvariantRefusedWhileWebhookReady, []string{"Pod gantry-system/b (uid uid-b) (Ready since 2026-03-01T12:00:00Z)"}}},
		},
		"refused while no replica was Ready": {
			steps: []step{
				{at: 70 * time.Second, objs: []any{replica("a", n, 20*time.Second), replica("b", n, 20*time.Second), refusal(67 * time.Second)}},
				{at: 75 * time.Second, objs: []any{replica("a", n, 20*time.Second), replica("b", n, 20*time.Second)}},
			},
		},
		"refused 4s after the only replica became Ready": {
			steps: []step{
				{at: 70 * time.Second, objs: []any{replica("a", 63*time.Second, 20*time.Second), refusal(67 * time.Second)}},
				{at: 75 * time.Second, objs: []any{replica("a", 63*time.Second, 20*time.Second)}},
			},
		},
		"refused while a replica served, judged only by a snapshot Skew after it": {
			steps: []step{
				{at: 60 * time.Second, objs: []any{replica("a", 0, n), refusal(59 * time.Second)}},
				// Shown after the refusal only now: a's end at 59s excuses it.
				{at: 64 * time.Second, objs: []any{replica("a", n, 59*time.Second)}},
			},
		},
		"an end remembered from an earlier snapshot": {
			steps: []step{
				{at: 50 * time.Second, objs: []any{replica("a", n, 48*time.Second), replica("b", 0, n)}},
				// Judged at 90s, when a's container has ended again (at 80s)
				// and its end at 48s is no longer its last.
				{at: 60 * time.Second, objs: []any{replica("a", 52*time.Second, 48*time.Second), replica("b", 0, n), refusal(56 * time.Second)}},
				{at: 90 * time.Second, objs: []any{replica("a", 85*time.Second, 80*time.Second), replica("b", 0, n)}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := run(t, cfg, tc.steps, tc.want)
			if got := c.Checks()[FamilyMetadataPolicy]; got != 1 {
				t.Errorf("%d MetadataPolicy checks, want 1 (the refusal)", got)
			}
		})
	}
}

// Without a webhook selector (a cluster whose kube-apiserver calls no
// webhook of Gantry's), refusals are not judged.
func TestWebhookRefusalsNotJudged(t *testing.T) {
	c := run(t, DefaultConfig(), []step{
		{at: 60 * time.Second, objs: []any{replica("a", 0, never()), refusal(50 * time.Second)}},
	}, nil)
	if got := c.Checks()[FamilyMetadataPolicy]; got != 0 {
		t.Errorf("%d MetadataPolicy checks, want 0", got)
	}
}

func never() time.Duration { return -time.Second }
