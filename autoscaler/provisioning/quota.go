package provisioning

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/kubernetes/pkg/quota/v1/evaluator/core"
	"k8s.io/utils/clock"
)

var podEvaluator = core.NewPodEvaluator(nil, clock.RealClock{})

// checkQuota reports whether the namespace's ResourceQuotas can admit every
// pod of the request on top of what they already count as used, with
// kube-apiserver's own pod usage and scope matching. The error names each
// quota and resource that would be exceeded.
func checkQuota(quotas []*v1.ResourceQuota, pods []*v1.Pod) error {
	var problems []string
	for _, q := range quotas {
		// The quota controller copies spec.hard to status.hard; a quota it
		// has not seen yet limits as its spec says.
		if len(q.Status.Hard) == 0 {
			q = q.DeepCopy()
			q.Status.Hard = q.Spec.Hard
		}
		hard := q.Status.Hard
		want := v1.ResourceList{}
		for _, p := range pods {
			ok, err := podEvaluator.Matches(q, p)
			if err != nil {
				return fmt.Errorf("matching ResourceQuota %s: %w", q.Name, err)
			}
			if !ok {
				continue
			}
			u, err := podEvaluator.Usage(p)
			if err != nil {
				return err
			}
			want = quota.Add(want, u)
		}
		names := quota.ResourceNames(hard)
		total := quota.Add(quota.Mask(q.Status.Used, names), quota.Mask(want, names))
		if ok, exceeded := quota.LessThanOrEqual(total, hard); !ok {
			sort.Slice(exceeded, func(i, j int) bool { return exceeded[i] < exceeded[j] })
			for _, r := range exceeded {
				used, h, add := q.Status.Used[r], hard[r], want[r]
				problems = append(problems, fmt.Sprintf("%s: %s requested %s, used %s, limited %s", q.Name, r, add.String(), used.String(), h.String()))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("exceeded quota: %s", strings.Join(problems, "; "))
	}
	return nil
}
