package cluster

import "testing"

func TestProvisionerFlag(t *testing.T) {
	for arg, want := range map[string]string{
		"simulation-budget=500":      "--simulation-budget=500",
		"--leader-elect=false":       "--leader-elect=false",
		"kubeconfig=":                "--kubeconfig=",
		"node-group-config=a=b.yaml": "--node-group-config=a=b.yaml",
	} {
		got, err := ProvisionerFlag(arg)
		if err != nil || got != want {
			t.Errorf("ProvisionerFlag(%q) = %q, %v; want %q", arg, got, err, want)
		}
	}
	for _, arg := range []string{"", "simulation-budget", "=500", "--=1", "two words=1"} {
		if got, err := ProvisionerFlag(arg); err == nil {
			t.Errorf("ProvisionerFlag(%q) = %q, want an error", arg, got)
		}
	}
}

// Complete refuses a malformed provisioner flag before anything starts.
func TestCompleteRefusesMalformedProvisionerArgs(t *testing.T) {
	o := &Options{Root: t.TempDir(), ProvisionerArgs: []string{"simulation-budget=1", "budget"}}
	if err := o.Complete(); err == nil {
		t.Fatal("Complete accepted --provisioner-arg budget")
	}
}
