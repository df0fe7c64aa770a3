package frameworkext

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	internalqueue "k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestScoreTable(t *testing.T) {
	scores := []fwk.NodePluginScores{
		{Name: "n1", TotalScore: 10, Scores: []fwk.PluginScore{{Name: "Fit", Score: 4}, {Name: "Spread", Score: 6}}},
		{Name: "n3", TotalScore: 30, Scores: []fwk.PluginScore{{Name: "Fit", Score: 30}, {Name: "Spread", Score: 0}}},
		{Name: "n2", TotalScore: 30, Scores: []fwk.PluginScore{{Name: "Fit", Score: 20}, {Name: "Spread", Score: 10}}},
	}
	got := ScoreTable(scores, 2)
	want := "" +
		"#  Node  Total  Fit  Spread\n" +
		"1  n2    30     20   10\n" +
		"2  n3    30     30   0\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

type hookPlugin struct{ name string }

func (p hookPlugin) Name() string { return p.name }
func (p hookPlugin) BeforeFilter(_ context.Context, _ fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) (*v1.Pod, fwk.NodeInfo, bool, *fwk.Status) {
	pod = pod.DeepCopy()
	pod.Annotations = map[string]string{"order": pod.Annotations["order"] + p.name + ","}
	return pod, ni, true, nil
}

type plainPlugin struct{ name string }

func (p plainPlugin) Name() string { return p.name }

func TestHooksRunInExtensionPointOrder(t *testing.T) {
	ps := &profileState{plugins: map[string]fwk.Plugin{
		"A": hookPlugin{"A"}, "B": hookPlugin{"B"}, "C": hookPlugin{"C"}, "Plain": plainPlugin{"Plain"},
	}}
	ps.orderHooks(&config.Plugins{Filter: config.PluginSet{Enabled: []config.Plugin{{Name: "NodeName"}, {Name: "C"}, {Name: "A"}}}})
	state := framework.NewCycleState()
	pod, _, st := ps.beforeFilter(context.Background(), state, &v1.Pod{}, nil)
	if !st.IsSuccess() {
		t.Fatal(st)
	}
	// C and A in their Filter order; B is not a filter plugin of the
	// profile's list, so it follows by name.
	if got := pod.Annotations["order"]; got != "C,A,B," {
		t.Errorf("hook order = %q, want C,A,B,", got)
	}

	// A plugin whose PreFilter returned Skip gets no filter hook in the
	// cycle, as upstream runs no Filter of it.
	state.SetSkipFilterPlugins(sets.New("A"))
	pod, _, st = ps.beforeFilter(context.Background(), state, &v1.Pod{}, nil)
	if !st.IsSuccess() {
		t.Fatal(st)
	}
	if got := pod.Annotations["order"]; got != "C,B," {
		t.Errorf("hooks run = %q, want C,B, (A skipped at PreFilter)", got)
	}
}

type svcPlugin struct{}

func (svcPlugin) Name() string { return "Demo" }
func (svcPlugin) RegisterEndpoints(r Router) {
	r.Get("/things/{name}", func(w http.ResponseWriter, req *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"name": req.PathValue("name")})
	})
	r.GetLeaderOnly("/state", func(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, http.StatusOK, "leader state") })
}

func TestServices(t *testing.T) {
	e := New()
	svcPlugin{}.RegisterEndpoints(e.services.router("Demo"))
	leader := false
	srv := httptest.NewServer(e.ServicesHandler(func() bool { return leader }))
	defer srv.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	code, body := get("/gantry/v1/__services__")
	var services map[string][]string
	if err := json.Unmarshal([]byte(body), &services); err != nil || code != 200 {
		t.Fatalf("__services__: %d %s", code, body)
	}
	want := []string{"/gantry/v1/__services__", "/gantry/v1/nodes/{node}", "/gantry/v1/plugins/Demo/state", "/gantry/v1/plugins/Demo/things/{name}"}
	if diff := cmp.Diff(want, services["GET"]); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
	if code, body := get("/gantry/v1/plugins/Demo/things/x"); code != 200 || !strings.Contains(body, `"x"`) {
		t.Errorf("plugin endpoint: %d %s", code, body)
	}
	if code, _ := get("/gantry/v1/plugins/Demo/state"); code != http.StatusServiceUnavailable {
		t.Errorf("leader-only endpoint on a follower: %d, want 503", code)
	}
	leader = true
	if code, _ := get("/gantry/v1/plugins/Demo/state"); code != 200 {
		t.Errorf("leader-only endpoint on the leader: %d, want 200", code)
	}
	if code, body := get("/gantry/v1/plugins/Demo/nope"); code != 404 || !strings.Contains(body, "__services__") {
		t.Errorf("unknown endpoint: %d %s", code, body)
	}
	if code, _ := get("/gantry/v1/nodes/n1"); code != http.StatusServiceUnavailable {
		t.Errorf("nodes before the scheduler is attached: %d, want 503", code)
	}
}

func TestDebugScoresFlag(t *testing.T) {
	e := New()
	if _, err := e.SetDebugScoresString("5"); err != nil || e.DebugScores() != 5 {
		t.Fatalf("set 5: %v, now %d", err, e.DebugScores())
	}
	for _, bad := range []string{"-1", "x", "", "2147483648"} {
		if _, err := e.SetDebugScoresString(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if e.DebugScores() != 5 {
		t.Errorf("a rejected value changed the setting to %d", e.DebugScores())
	}
}

// TestDebugScoresClamped: whoever may set the level cannot make every
// scored pod log (and sort into) a table of the whole cluster.
func TestDebugScoresClamped(t *testing.T) {
	e := New()
	for _, tc := range []struct {
		set        string
		want       int32
		wantInText string
	}{
		{set: "50", want: 50},
		{set: "51", want: MaxDebugScores, wantInText: "50 is the most"},
		{set: "2147483647", want: MaxDebugScores, wantInText: "50 is the most"},
		{set: "0", want: 0},
	} {
		out, err := e.SetDebugScoresString(tc.set)
		if err != nil {
			t.Fatalf("%s: %v", tc.set, err)
		}
		if got := e.DebugScores(); got != tc.want {
			t.Errorf("after %s: %d, want %d", tc.set, got, tc.want)
		}
		if !strings.Contains(out, tc.wantInText) {
			t.Errorf("answer to %s: %q, want it to say %q", tc.set, out, tc.wantInText)
		}
	}
	if got := e.SetDebugScores(1 << 30); got != MaxDebugScores {
		t.Errorf("SetDebugScores(1<<30) set %d, want %d", got, MaxDebugScores)
	}

	// ScoreTable itself never shows more than MaxDebugScores rows.
	scores := make([]fwk.NodePluginScores, 200)
	for i := range scores {
		scores[i] = fwk.NodePluginScores{Name: fmt.Sprintf("n%03d", i), TotalScore: int64(i)}
	}
	lines := strings.Split(strings.TrimSpace(ScoreTable(scores, 1<<30)), "\n")
	if got := len(lines) - 1; got != MaxDebugScores {
		t.Errorf("table of 200 nodes asked for 1<<30 rows: %d rows, want %d", got, MaxDebugScores)
	}
	if f := strings.Fields(lines[1]); len(f) < 2 || f[1] != "n199" {
		t.Errorf("first row %q, want the highest total (n199)", lines[1])
	}
}

type hintPlugin struct{ name, node string }

func (p hintPlugin) Name() string                                             { return p.name }
func (p hintPlugin) HintNode(context.Context, fwk.CycleState, *v1.Pod) string { return p.node }

// batchFramework stands in for upstream's framework: only its batching
// methods are called.
type batchFramework struct {
	framework.Framework
	hint   string
	stored []string // hinted node as StoreScheduleResults was given it
}

func (b *batchFramework) GetNodeHint(context.Context, *v1.Pod, fwk.PodSignature, fwk.CycleState, int64) string {
	return b.hint
}

func (b *batchFramework) StoreScheduleResults(_ context.Context, _ fwk.PodSignature, hinted, _ string, _ framework.SortedScoredNodes, _ int64) {
	b.stored = append(b.stored, hinted)
}

func TestNodeHints(t *testing.T) {
	ps := &profileState{plugins: map[string]fwk.Plugin{
		"Quiet": hintPlugin{"Quiet", ""}, "Second": hintPlugin{"Second", "n2"}, "First": hintPlugin{"First", "n1"},
	}}
	ps.orderHooks(&config.Plugins{PreFilter: config.PluginSet{Enabled: []config.Plugin{{Name: "Quiet"}, {Name: "First"}, {Name: "Second"}}}})
	upstream := &batchFramework{}
	f := &extendedFramework{Framework: upstream, ext: New(), profile: ps}
	ctx := context.Background()
	pod := &v1.Pod{}

	// The first non-empty hint in PreFilter order.
	state := framework.NewCycleState()
	if got := f.GetNodeHint(ctx, pod, nil, state, 1); got != "n1" {
		t.Errorf("hint = %q, want n1 (First, the first plugin with one)", got)
	}
	// A plugin's hint is not passed to upstream's batching as the batch's.
	f.StoreScheduleResults(ctx, nil, "n1", "n1", nil, 1)

	// A plugin whose PreFilter returned Skip is not asked.
	state = framework.NewCycleState()
	state.SetSkipFilterPlugins(sets.New("First"))
	if got := f.GetNodeHint(ctx, pod, nil, state, 2); got != "n2" {
		t.Errorf("hint = %q, want n2 (First skipped at PreFilter)", got)
	}
	// The pod failed in cycle 2 (nothing stored); cycle 3's hint is the
	// batch's own, and is passed on as such.
	upstream.hint = "batched"
	if got := f.GetNodeHint(ctx, pod, nil, framework.NewCycleState(), 3); got != "batched" {
		t.Errorf("hint = %q, want upstream's batching hint first", got)
	}
	f.StoreScheduleResults(ctx, nil, "batched", "batched", nil, 3)
	if want := []string{"", "batched"}; !cmp.Equal(upstream.stored, want) {
		t.Errorf("hinted nodes given to upstream's batching = %q, want %q", upstream.stored, want)
	}
}

// Upstream's batching re-checks the node it last chose without the filter
// hooks: it is not asked for a pod whose hooks run.
func TestNodeHintsSkipBatchingUnderFilterHooks(t *testing.T) {
	ps := &profileState{plugins: map[string]fwk.Plugin{"Hook": hookPlugin{"Hook"}, "Hinter": hintPlugin{"Hinter", "n1"}}}
	ps.orderHooks(&config.Plugins{
		PreFilter: config.PluginSet{Enabled: []config.Plugin{{Name: "Hook"}, {Name: "Hinter"}}},
		Filter:    config.PluginSet{Enabled: []config.Plugin{{Name: "Hook"}}},
	})
	upstream := &batchFramework{hint: "batched"}
	f := &extendedFramework{Framework: upstream, ext: New(), profile: ps}
	ctx := context.Background()

	if got := f.GetNodeHint(ctx, &v1.Pod{}, nil, framework.NewCycleState(), 1); got != "n1" {
		t.Errorf("hint with the filter hook active = %q, want n1 (the plugin's, not the batch's)", got)
	}
	state := framework.NewCycleState()
	state.SetSkipFilterPlugins(sets.New("Hook", "Hinter"))
	if got := f.GetNodeHint(ctx, &v1.Pod{}, nil, state, 2); got != "batched" {
		t.Errorf("hint with the hook skipped = %q, want the batch's", got)
	}
}

// A value one plugin Sets under a key is what another Looks up in the same
// scheduler, and nothing in another; an interface-typed key holds nil as
// "none", and another key of the same name and type is another slot.
func TestSharedKeySetLookup(t *testing.T) {
	type view interface{ String() string }
	key := NewSharedKey[view]("view")
	a, b := New(), New()
	if v, ok := key.Lookup(a); ok || v != nil {
		t.Fatalf("Lookup before Set = %v, %v; want nil, false", v, ok)
	}
	key.Set(a, key)
	if v, ok := key.Lookup(a); !ok || v != view(key) {
		t.Errorf("Lookup after Set = %v, %v; want the value set, true", v, ok)
	}
	if _, ok := key.Lookup(b); ok {
		t.Error("a value Set in one scheduler is seen in another")
	}
	if _, ok := NewSharedKey[view]("view").Lookup(a); ok {
		t.Error("another key of the same name sees the value")
	}
	key.Set(a, nil)
	if v, ok := key.Lookup(a); !ok || v != nil {
		t.Errorf("Lookup after Set(nil) = %v, %v; want nil, true", v, ok)
	}
	if v := key.Get(a, func() view { return key }); v != nil {
		t.Errorf("Get after Set(nil) = %v; want the nil that was set", v)
	}
}

func TestNodeView(t *testing.T) {
	metrics.Register() // the scheduler's cache and queue report metrics
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	node := wrappers.MakeNode("n1").Capacity("cpu", "4", "memory", "8Gi", "pods", "10").Obj()
	bound := wrappers.MakePod("b", "team").UID("uid-b").Requests("cpu", "1").NodeName("n1").Obj()
	// A reservation's pod, as the Reservation plugin caches it: no namespace.
	reserved := wrappers.MakePod("r1", "").UID("uid-r1").Requests("cpu", "2").NodeName("n1").Obj()
	preemptor := wrappers.MakePod("p", "team").UID("uid-p").Requests("cpu", "3").NominatedNodeName("n1").Obj()
	other := wrappers.MakePod("q", "team").UID("uid-q").Requests("cpu", "1").Obj()

	cache := internalcache.New(ctx, nil, false, false)
	cache.AddNode(logger, node)
	for _, p := range []*v1.Pod{bound, reserved} {
		if err := cache.AddPod(logger, p); err != nil {
			t.Fatal(err)
		}
	}
	// The nominator nominates only pods its lister knows, unbound. The
	// queue nominates a pod it takes in by its status.nominatedNodeName.
	queue := internalqueue.NewTestQueueWithObjects(ctx, func(fwk.QueuedEntityInfo, fwk.QueuedEntityInfo) bool { return false }, []runtime.Object{preemptor, other})
	queue.Add(ctx, preemptor)
	queue.AddNominatedPod(logger, &framework.PodInfo{Pod: other}, &fwk.NominatingInfo{NominatingMode: fwk.ModeOverride, NominatedNodeName: "n2"})

	e := New()
	if err := e.Attach(&scheduler.Scheduler{Cache: cache, SchedulingQueue: queue, Profiles: profile.Map{}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.ServicesHandler(func() bool { return true }))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/gantry/v1/nodes/n1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got NodeView
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("nodes/n1: %d, %v", resp.StatusCode, err)
	}
	want := []NodeViewPod{{Namespace: "team", Name: "p", UID: "uid-p", Requests: wrappers.ResourceList("cpu", "3")}}
	if diff := cmp.Diff(want, got.Nominated); diff != "" {
		t.Errorf("nominated (-want +got):\n%s", diff)
	}
	wantPods := []NodeViewPod{
		{Name: "r1", UID: "uid-r1", Requests: wrappers.ResourceList("cpu", "2")},
		{Namespace: "team", Name: "b", UID: "uid-b", Requests: wrappers.ResourceList("cpu", "1")},
	}
	if diff := cmp.Diff(wantPods, got.Pods); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
}
