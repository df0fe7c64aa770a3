package kind

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCanBePrivileged(t *testing.T) {
	for status, want := range map[string]bool{
		"Name:\tx\nCapBnd:\t000001ffffffffff\n": true,
		"CapBnd:\t000001fffeffffff\n":            false, // this CI machine's set: no CAP_SYS_RESOURCE
		"CapBnd:\t0000000001000000":              true,
	} {
		got, err := canBePrivileged(status)
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", status, got, err, want)
		}
	}
	for _, bad := range []string{"", "CapBnd:\tzz\n"} {
		if _, err := canBePrivileged(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestShim runs the shim with a fake docker that prints its arguments.
func TestShim(t *testing.T) {
	dir := t.TempDir()
	shim := filepath.Join(dir, "shim")
	if err := os.WriteFile(shim, dockerShim, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "real-docker")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []string {
		cmd := exec.Command(shim, args...)
		cmd.Env = append(os.Environ(), "GANTRY_REAL_DOCKER="+fake)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	got := strings.Join(run("run", "--name", "n", "--privileged", "--tmpfs", "/run", "img"), " ")
	for _, want := range []string{"run --name n --cap-add=ALL --cap-drop=SYS_RESOURCE", "--security-opt=systempaths=unconfined", "--device-cgroup-rule=a *:* rwm", "--device=/dev/kmsg", "--tmpfs /run img"} {
		if !strings.Contains(got, want) {
			t.Errorf("run: %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "--privileged") {
		t.Errorf("run kept --privileged: %q", got)
	}
	if got := strings.Join(run("exec", "--privileged", "-i", "n", "ctr", "--privileged"), " "); got != "exec -i n ctr" {
		// The shim drops every --privileged, the one after the command too:
		// kind never passes that word to a node command.
		t.Errorf("exec: %q", got)
	}
	if got := strings.Join(run("ps", "--privileged"), " "); got != "ps --privileged" {
		t.Errorf("other commands pass unchanged: %q", got)
	}
}
