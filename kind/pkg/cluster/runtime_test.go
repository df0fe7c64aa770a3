package cluster

import "testing"

func TestStateOf(t *testing.T) {
	if got := StateOf(nil); got != StateRunning {
		t.Errorf("no stopped component: %s", got)
	}
	if got := StateOf([]string{"kube-scheduler"}); got != StateStopped {
		t.Errorf("a stopped component: %s", got)
	}
}
