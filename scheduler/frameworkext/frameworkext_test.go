package frameworkext

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
)

func TestScoreTable(t *testing.T) {
	scores := []fwk.NodePluginScores{
		{Name: "n1", TotalScore: 10, Scores: []fwk.PluginScore{{Name: "Fit", Score: 4}, {Name: "Reservation", Score: 6}}},
		{Name: "n3", TotalScore: 30, Scores: []fwk.PluginScore{{Name: "Fit", Score: 30}, {Name: "Reservation", Score: 0}}},
		{Name: "n2", TotalScore: 30, Scores: []fwk.PluginScore{{Name: "Fit", Score: 20}, {Name: "Reservation", Score: 10}}},
	}
	got := ScoreTable(scores, 2)
	want := "" +
		"#  Node  Total  Fit  Reservation\n" +
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
	pod, _, st := ps.beforeFilter(context.Background(), nil, &v1.Pod{}, nil)
	if !st.IsSuccess() {
		t.Fatal(st)
	}
	// C and A in their Filter order; B is not a filter plugin of the
	// profile's list, so it follows by name.
	if got := pod.Annotations["order"]; got != "C,A,B," {
		t.Errorf("hook order = %q, want C,A,B,", got)
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

	code, body := get("/apis/v1/__services__")
	var services map[string][]string
	if err := json.Unmarshal([]byte(body), &services); err != nil || code != 200 {
		t.Fatalf("__services__: %d %s", code, body)
	}
	want := []string{"/apis/v1/__services__", "/apis/v1/nodes/{node}", "/apis/v1/plugins/Demo/state", "/apis/v1/plugins/Demo/things/{name}"}
	if diff := cmp.Diff(want, services["GET"]); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
	if code, body := get("/apis/v1/plugins/Demo/things/x"); code != 200 || !strings.Contains(body, `"x"`) {
		t.Errorf("plugin endpoint: %d %s", code, body)
	}
	if code, _ := get("/apis/v1/plugins/Demo/state"); code != http.StatusServiceUnavailable {
		t.Errorf("leader-only endpoint on a follower: %d, want 503", code)
	}
	leader = true
	if code, _ := get("/apis/v1/plugins/Demo/state"); code != 200 {
		t.Errorf("leader-only endpoint on the leader: %d, want 200", code)
	}
	if code, body := get("/apis/v1/plugins/Demo/nope"); code != 404 || !strings.Contains(body, "__services__") {
		t.Errorf("unknown endpoint: %d %s", code, body)
	}
	if code, _ := get("/apis/v1/nodes/n1"); code != http.StatusServiceUnavailable {
		t.Errorf("nodes before the scheduler is attached: %d, want 503", code)
	}
}

func TestDebugScoresFlag(t *testing.T) {
	e := New()
	if _, err := e.SetDebugScoresString("5"); err != nil || e.DebugScores() != 5 {
		t.Fatalf("set 5: %v, now %d", err, e.DebugScores())
	}
	for _, bad := range []string{"-1", "x", ""} {
		if _, err := e.SetDebugScoresString(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if e.DebugScores() != 5 {
		t.Errorf("a rejected value changed the setting to %d", e.DebugScores())
	}
}
