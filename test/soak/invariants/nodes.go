package invariants

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// InvariantNodeOutlivesRequest: a node a scale-up attempt added outlived
// its request, unused, by more than scale-down's time.
const InvariantNodeOutlivesRequest = "NodeOutlivesRequest"

// checkScaleDown judges the nodes scale-up attempts added (labelled with
// their attempt, "<request UID>-<n>"): once the attempt's request is gone
// or has ended and nothing uses the node, scale-down removes it within
// its unneeded time, taint grace and interval (autoscaler/provisioning/
// scaledown RunOnce); a deleted request's unused nodes go at once
// (controller.go release, removeUnusedNodes), within the same bound. A
// node is used, as scale-down reads it (provisioning nodeuse.go HoldsNode,
// BookedNodes; scaledown holds), by a pod bound there or nominated there
// that has not finished (but DaemonSet and mirror pods), or by a live
// Reservation placed there or pinned to it. A node being deleted is not
// judged.
func (c *Checker) checkScaleDown(ix *index) []Violation {
	present := map[string]bool{}
	defer func() {
		for k := range c.nodeUse {
			if !present[k] {
				delete(c.nodeUse, k)
			}
		}
	}()
	if c.cfg.ScaleDownUnneededTime <= 0 {
		return nil
	}
	used := map[string]bool{}
	for _, p := range ix.s.Pods {
		switch {
		case !provisioning.HoldsNode(p):
		case p.Spec.NodeName != "":
			used[p.Spec.NodeName] = true
		case p.Status.NominatedNodeName != "":
			used[p.Status.NominatedNodeName] = true
		}
	}
	for _, r := range ix.s.Reservations {
		switch phase(r) {
		case schedv1alpha1.ReservationAvailable:
			used[r.Status.NodeName] = true
		case schedv1alpha1.ReservationPending:
			used[r.Spec.Template.NodeName] = true
		}
	}
	wait := c.cfg.ScaleDownUnneededTime + c.cfg.ScaleDownTaintGrace + c.cfg.ScaleDownInterval + c.cfg.Grace
	var out []Violation
	now := ix.now
	for _, n := range ix.s.Nodes {
		attempt := n.Labels[labelAttempt]
		uid, ok := attemptRequest(attempt)
		if !ok || n.DeletionTimestamp != nil || slices.Contains(c.cfg.KeepNodeGroups, n.Labels[labelNodeGroup]) {
			continue
		}
		key := n.Name + "/" + string(n.UID)
		present[key] = true
		c.checks[FamilyScaleDown]++
		if used[n.Name] {
			c.nodeUse[key] = now
			continue
		}
		end, why, pr, over := c.requestEnd(ix, uid)
		if !over {
			continue
		}
		since, lastUse := end, c.nodeUse[key]
		if lastUse.After(since) {
			since = lastUse
		}
		limit := since.Add(wait)
		if !now.After(limit) {
			continue
		}
		req := ObjectRef{Kind: "ProvisioningRequest", UID: uid}
		if pr != nil {
			req = requestRef(pr)
		}
		unused := "the checker has not seen it used"
		if !lastUse.IsZero() {
			unused = "nothing has used it since " + stamp(lastUse)
		}
		out = append(out, c.report(key, Violation{
			Family: FamilyScaleDown, Invariant: InvariantNodeOutlivesRequest, Objects: []ObjectRef{nodeRef(n), req},
			Since: since, Limit: limit, Seen: now,
			Message: fmt.Sprintf("%s, added by scale-up attempt %s, still exists at %s; its %s %s, and %s; scale-down (unneeded %s, taint grace %s, interval %s, plus %s) should have removed it by %s: %s past the limit",
				nodeRef(n), attempt, stamp(now), req, why, unused, c.cfg.ScaleDownUnneededTime, c.cfg.ScaleDownTaintGrace,
				c.cfg.ScaleDownInterval, c.cfg.Grace, stamp(limit), span(now.Sub(limit))),
		})...)
	}
	return out
}

// attemptRequest is the request UID of an attempt ID, "<request UID>-<n>"
// with n ≥ 1 (provisioning request.go attemptID).
func attemptRequest(attempt string) (types.UID, bool) {
	i := strings.LastIndex(attempt, "-")
	if i <= 0 {
		return "", false
	}
	n, err := strconv.Atoi(attempt[i+1:])
	return types.UID(attempt[:i]), err == nil && n >= 1
}
