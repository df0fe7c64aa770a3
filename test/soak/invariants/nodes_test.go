package invariants

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestScaleDown(t *testing.T) {
	const ns = "team"
	added := wrappers.MakeNode("n-att").Capacity("cpu", "4").Label(labelAttempt, "req-1-1").Label(labelNodeGroup, "g1").Obj()
	liveReq := request(ns, "req", "req-1", provv1.ClassBestEffortAtomicScaleUp, 1).Obj()
	failed := condition(request(ns, "req", "req-1", provv1.ClassBestEffortAtomicScaleUp, 1),
		provv1.ConditionFailed, metav1.ConditionTrue, "ValidityExpired", 0).Obj()
	running := pod(ns, "p", "1", "n-att").Obj()
	daemon := pod(ns, "d", "1", "n-att").Obj()
	daemon.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", Controller: ptr.To(true)}}
	nominated := pod(ns, "nom", "1", "").NominatedNodeName("n-att").Obj()
	// The defaults give a node 10m45s: unneeded time, taint grace,
	// interval and grace.
	const wait = 10*time.Minute + 45*time.Second
	cases := map[string]struct {
		cfg   func(*Config)
		steps []step
		want  []want
	}{
		"its request lives": {
			steps: []step{{time.Hour, []any{added, liveReq}}},
		},
		"its request ended, within scale-down's time": {
			steps: []step{{wait, []any{added, failed}}},
		},
		"its request ended, past scale-down's time": {
			steps: []step{{wait + time.Second, []any{added, failed}}},
			want: []want{{InvariantNodeOutlivesRequest, []string{"Node n-att, added by scale-up attempt req-1-1, still exists at 2026-03-01T12:10:46Z",
				"its ProvisioningRequest team/req (uid req-1) ended at 2026-03-01T12:00:00Z (Failed=True, reason ValidityExpired), and the checker has not seen it used",
				"should have removed it by 2026-03-01T12:10:45Z: 1s past the limit"}}},
		},
		"used by a pod until later": {
			steps: []step{{5 * time.Minute, []any{added, failed, running}}, {5*time.Minute + wait, []any{added, failed}}},
		},
		"unused for scale-down's time after a pod left": {
			steps: []step{{5 * time.Minute, []any{added, failed, running}}, {5*time.Minute + wait + time.Second, []any{added, failed}}},
			want:  []want{{InvariantNodeOutlivesRequest, []string{"nothing has used it since 2026-03-01T12:05:00Z", "1s past the limit"}}},
		},
		"its request gone": {
			steps: []step{{0, []any{added}}, {wait + time.Second, []any{added}}},
			want:  []want{{InvariantNodeOutlivesRequest, []string{"its ProvisioningRequest (uid req-1) has been gone since 2026-03-01T12:00:00Z, as first seen"}}},
		},
		"a booking keeps it": {
			steps: []step{{time.Hour, []any{added, failed, rsv("r1", "1", 0).Available("n-att").Obj()}}},
		},
		"a pod nominated there keeps it": {
			steps: []step{{time.Hour, []any{added, failed, nominated}}},
		},
		"a DaemonSet pod does not keep it": {
			steps: []step{{wait + time.Second, []any{added, failed, daemon}}},
			want:  []want{{InvariantNodeOutlivesRequest, []string{"Node n-att"}}},
		},
		"a node group kept at its minimum size": {
			cfg:   func(c *Config) { c.KeepNodeGroups = []string{"g1"} },
			steps: []step{{time.Hour, []any{added, failed}}},
		},
		"scale-down off": {
			cfg:   func(c *Config) { c.ScaleDownUnneededTime = 0 },
			steps: []step{{time.Hour, []any{added, failed}}},
		},
		"a node no attempt added": {
			steps: []step{{time.Hour, []any{wrappers.MakeNode("n1").Label(labelAttempt, "req-1-0").Obj(), failed}}},
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
