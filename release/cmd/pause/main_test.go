package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the tests run this program's main in a child process.
func TestMain(m *testing.M) {
	if os.Getenv("GANTRY_PAUSE_MAIN") == "1" {
		os.Args = append([]string{"pause"}, strings.Fields(os.Getenv("GANTRY_PAUSE_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(t *testing.T, args string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GANTRY_PAUSE_MAIN=1", "GANTRY_PAUSE_ARGS="+args)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

func TestExitsCleanlyOnTerm(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd, out := child(t, "")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A SIGCHLD (nothing to reap) must not stop it.
		time.Sleep(200 * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGCHLD)
		time.Sleep(100 * time.Millisecond)
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%v: exit %v, want 0\n%s", sig, err, out)
			}
			if !strings.Contains(out.String(), "shutting down") {
				t.Errorf("%v: output %q", sig, out)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%v: still running after 10s", sig)
		}
	}
}

func TestVersionAndUsage(t *testing.T) {
	cmd, out := child(t, "-v")
	if err := cmd.Run(); err != nil || !strings.HasPrefix(out.String(), "pause (Gantry) ") {
		t.Errorf("-v: %v %q", err, out)
	}
	cmd, out = child(t, "--bogus")
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(out.String(), "usage") {
		t.Errorf("--bogus: %v %q", err, out)
	}
}
