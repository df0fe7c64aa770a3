package repo

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestRootFromBazelRun(t *testing.T) {
	want := t.TempDir()
	t.Setenv("BUILD_WORKSPACE_DIRECTORY", want)
	got, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("Root() = %q, want BUILD_WORKSPACE_DIRECTORY %q", got, want)
	}
}

func TestRootWalksUp(t *testing.T) {
	t.Setenv("BUILD_WORKSPACE_DIRECTORY", "")
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, Marker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The root itself, and directories below it at any depth.
	deep := filepath.Join(root, "a", "b", "c")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, filepath.Join(root, "a"), deep} {
		t.Run(dir, func(t *testing.T) {
			t.Chdir(dir)
			got, err := Root()
			if err != nil {
				t.Fatal(err)
			}
			if got != root {
				t.Errorf("Root() from %s = %q, want %q", dir, got, root)
			}
		})
	}
}

func TestRootNearestMarkerWins(t *testing.T) {
	t.Setenv("BUILD_WORKSPACE_DIRECTORY", "")
	outer, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(outer, "inner")
	if err := os.MkdirAll(filepath.Join(inner, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{outer, inner} {
		if err := os.WriteFile(filepath.Join(dir, Marker), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(filepath.Join(inner, "sub"))
	got, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	if got != inner {
		t.Errorf("Root() = %q, want the nearest checkout %q", got, inner)
	}
}

func TestRootNotFound(t *testing.T) {
	t.Setenv("BUILD_WORKSPACE_DIRECTORY", "")
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, Marker)); err == nil {
			t.Skipf("%s holds a %s file, so every directory below it is in a checkout", d, Marker)
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	t.Chdir(dir)
	_, err = Root()
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Root() error = %v, want ErrNotFound", err)
	}
}
