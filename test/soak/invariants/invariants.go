package invariants

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// Family is a group of issue 40's invariants.
type Family string

// The families the checker covers.
const (
	FamilyReservation    Family = "Reservation"
	FamilyQuota          Family = "Quota"
	FamilyProvisioning   Family = "ProvisioningRequest"
	FamilyScaleDown      Family = "ScaleDown"
	FamilyPreemption     Family = "Preemption"
	FamilyMetadataPolicy Family = "MetadataPolicy"
	FamilyLeak           Family = "Leak"
)

// Families are the families in the order reports list them.
var Families = []Family{FamilyReservation, FamilyQuota, FamilyProvisioning, FamilyScaleDown, FamilyPreemption, FamilyMetadataPolicy, FamilyLeak}

// Snapshot is the cluster as the soak test's informers show it at Time.
// Each list holds every object of its kind (an empty list says there is
// none: a booking whose request is not listed counts as orphaned). The
// checker only reads the objects.
type Snapshot struct {
	Time                 time.Time
	Reservations         []*schedv1alpha1.Reservation
	ProvisioningRequests []*provv1.ProvisioningRequest
	Pods                 []*v1.Pod
	Nodes                []*v1.Node
	ResourceQuotas       []*v1.ResourceQuota
	MetadataPolicies     []*policyv1alpha1.MetadataPolicy
	// SchedulerNodes are kube-scheduler's views of the nodes (GET
	// /gantry/v1/nodes/{node}): its cache and its nominations. nil: the
	// scheduler's view was not read (it did not answer), and only the
	// checks of API objects run. A node missing from a non-nil list is one
	// the scheduler does not know.
	SchedulerNodes []frameworkext.NodeView
	// Refusals are the writes admission refused because of the webhook
	// (see Refusal) since the previous snapshot: each is given once.
	Refusals []Refusal
}

// ObjectRef names an object a violation involves.
type ObjectRef struct {
	Kind      string
	Namespace string
	Name      string
	UID       types.UID
}

func (o ObjectRef) String() string {
	s := o.Kind
	switch {
	case o.Namespace != "":
		s += " " + o.Namespace + "/" + o.Name
	case o.Name != "":
		s += " " + o.Name
	}
	if o.UID != "" {
		s += " (uid " + string(o.UID) + ")"
	}
	return s
}

// Violation is an invariant found broken. A violation that persists from
// one snapshot to the next is reported once; one that clears and comes back
// is reported again.
type Violation struct {
	Family Family
	// Invariant names the broken invariant within its family (the Invariant*
	// constants).
	Invariant string
	Objects   []ObjectRef
	// Since is when the violating state began: when its time limit started
	// (an expiry, a request's end, a node's deletion as first seen), or, for
	// a state that must never hold, the first snapshot that showed it.
	Since time.Time
	// Limit is when the state had to be over; zero for a state that must
	// never hold.
	Limit time.Time
	// Seen is the time of the snapshot (or last sample) that reported it.
	Seen time.Time
	// Message says all of the above in a sentence.
	Message string
}

// Over is how far past its limit the violation was seen (0 without one).
func (v Violation) Over() time.Duration {
	if v.Limit.IsZero() {
		return 0
	}
	return v.Seen.Sub(v.Limit)
}

func (v Violation) String() string {
	return fmt.Sprintf("[%s/%s] %s", v.Family, v.Invariant, v.Message)
}

// Counts are the invariant checks made per family: one check is one
// invariant judged on one object (a Reservation, a node and resource, a
// quota and resource, a request, a component's metric) in one snapshot.
type Counts map[Family]int

// Total is the number of checks over all families.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func (c Counts) String() string {
	parts := make([]string, 0, len(Families))
	for _, f := range Families {
		parts = append(parts, fmt.Sprintf("%s %d", f, c[f]))
	}
	return fmt.Sprintf("%d invariant checks made (%s)", c.Total(), strings.Join(parts, ", "))
}

// Checker judges snapshots against the invariants. It keeps what it must
// across snapshots (when a state was first seen, which violations are
// open), so it is fed every snapshot of a run, in time order, from one
// goroutine.
type Checker struct {
	cfg Config

	// states: when each state (a request gone, a violation pending its
	// Config.Skew) was first seen; a state not marked again by a snapshot
	// is forgotten after it.
	states  map[string]time.Time
	touched map[string]bool
	// open are the violations reported and still holding, by key.
	open     map[string]bool
	reported []Violation
	checks   Counts

	requests map[types.UID]*requestMemory
	nodeUse  map[string]time.Time
	leaks    map[string]bool
	policies map[types.UID]*policyMemory
	webhook  webhookMemory
}

// NewChecker returns a checker with cfg (see DefaultConfig).
func NewChecker(cfg Config) *Checker {
	return &Checker{
		cfg:      cfg,
		states:   map[string]time.Time{},
		open:     map[string]bool{},
		checks:   Counts{},
		requests: map[types.UID]*requestMemory{},
		nodeUse:  map[string]time.Time{},
		leaks:    map[string]bool{},
		policies: map[types.UID]*policyMemory{},
		webhook:  webhookMemory{ended: map[types.UID][]time.Time{}},
	}
}

// Check judges s and returns the violations it shows that were not reported
// before, ordered by family, invariant and message.
func (c *Checker) Check(s *Snapshot) []Violation {
	c.touched = map[string]bool{}
	ix := newIndex(s)
	var out []Violation
	out = append(out, c.checkReservations(ix)...)
	out = append(out, c.checkQuotas(ix)...)
	out = append(out, c.checkRequests(ix)...)
	out = append(out, c.checkScaleDown(ix)...)
	out = append(out, c.checkPreemption(ix)...)
	out = append(out, c.checkMetadataPolicies(ix)...)
	out = append(out, c.checkWebhook(ix)...)
	for k := range c.states {
		if !c.touched[k] {
			delete(c.states, k)
		}
	}
	for k := range c.open {
		if !c.touched[k] {
			delete(c.open, k)
		}
	}
	c.touched = nil
	sortViolations(out)
	c.reported = append(c.reported, out...)
	return out
}

// Violations are every violation reported so far, in the order reported.
func (c *Checker) Violations() []Violation { return slices.Clone(c.reported) }

// Checks are the checks made so far.
func (c *Checker) Checks() Counts { return maps.Clone(c.checks) }

// since returns when the state key was first seen, now if it is new, and
// keeps it for the next snapshot.
func (c *Checker) since(key string, now time.Time) time.Time {
	c.touched[key] = true
	t, ok := c.states[key]
	if !ok {
		c.states[key] = now
		return now
	}
	return t
}

// persisted reports whether the state key, which must never hold, has held
// for Config.Skew, and since when: snapshots are put together from several
// informers, which may show two objects at moments Skew apart.
func (c *Checker) persisted(key string, now time.Time) (time.Time, bool) {
	t := c.since("state/"+key, now)
	return t, now.Sub(t) >= c.cfg.Skew
}

// report returns v, with key, unless it is open already.
func (c *Checker) report(key string, v Violation) []Violation {
	key = string(v.Family) + "/" + v.Invariant + "/" + key
	c.touched[key] = true
	if c.open[key] {
		return nil
	}
	c.open[key] = true
	return []Violation{v}
}

func sortViolations(vs []Violation) {
	order := map[Family]int{}
	for i, f := range Families {
		order[f] = i
	}
	sort.SliceStable(vs, func(i, j int) bool {
		a, b := vs[i], vs[j]
		if a.Family != b.Family {
			return order[a.Family] < order[b.Family]
		}
		if a.Invariant != b.Invariant {
			return a.Invariant < b.Invariant
		}
		return a.Message < b.Message
	})
}

// stamp writes t for a message.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "(unknown)"
	}
	return t.UTC().Format(time.RFC3339)
}

// span writes d for a message: whole seconds from a second up.
func span(d time.Duration) string {
	if d >= time.Second || d <= -time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// count is n things, "1 pod" or "2 pods".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// refs lists objects for a message, at most limit of them.
func refs(objs []ObjectRef, limit int) string {
	var parts []string
	for i, o := range objs {
		if i == limit {
			parts = append(parts, fmt.Sprintf("and %d more", len(objs)-limit))
			break
		}
		parts = append(parts, o.String())
	}
	return strings.Join(parts, ", ")
}
