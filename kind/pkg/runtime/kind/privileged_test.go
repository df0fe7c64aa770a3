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
		"CapBnd:\t000001fffeffffff\n":           false, // this CI machine's set: no CAP_SYS_RESOURCE
		"CapBnd:\t0000000001000000":             true,
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

func TestDockerPath(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	shimDir := filepath.Join(t.TempDir(), "shim")

	env, restricted, err := dockerPath(shimDir, "CapBnd:\t000001ffffffffff\n")
	if err != nil || restricted || env != nil {
		t.Errorf("privileged Docker: env %v restricted %v err %v; want nothing changed", env, restricted, err)
	}
	if _, err := os.Stat(shimDir); err == nil {
		t.Error("the shim was written where Docker can grant --privileged")
	}

	env, restricted, err = dockerPath(shimDir, "CapBnd:\t000001fffeffffff\n")
	if err != nil || !restricted {
		t.Fatalf("restricted Docker: restricted %v err %v", restricted, err)
	}
	want := []string{"PATH=" + shimDir + string(os.PathListSeparator) + bin, "GANTRY_REAL_DOCKER=" + filepath.Join(bin, "docker")}
	if strings.Join(env, " ") != strings.Join(want, " ") {
		t.Errorf("env %q, want %q", env, want)
	}
	if st, err := os.Stat(filepath.Join(shimDir, "docker")); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("shim not written executable: %v", err)
	}

	// A child of a process that put the shim first on PATH finds the shim:
	// it must stand for its parent's docker, not for itself.
	for k, v := range map[string]string{"PATH": env[0][len("PATH="):], "GANTRY_REAL_DOCKER": filepath.Join(bin, "docker")} {
		t.Setenv(k, v)
	}
	child, _, err := dockerPath(shimDir, "CapBnd:\t000001fffeffffff\n")
	if err != nil || len(child) != 2 || child[1] != "GANTRY_REAL_DOCKER="+filepath.Join(bin, "docker") {
		t.Errorf("a child of a shimmed process: env %q, %v; want GANTRY_REAL_DOCKER=%s", child, err, filepath.Join(bin, "docker"))
	}

	t.Setenv("GANTRY_REAL_DOCKER", "")
	t.Setenv("PATH", t.TempDir())
	if _, _, err := dockerPath(shimDir, "CapBnd:\t000001fffeffffff\n"); err == nil || !strings.Contains(err.Error(), "docker is not on PATH") {
		t.Errorf("no docker: err = %v", err)
	}
}
