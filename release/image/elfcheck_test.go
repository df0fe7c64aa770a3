package image

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestResolves(t *testing.T) {
	tree := map[string]File{}
	for _, f := range []File{
		{Path: "/usr", Dir: true}, {Path: "/usr/lib", Dir: true}, {Path: "/usr/lib/libx.so.1", Data: []byte{}},
		{Path: "/usr/lib/libx.so", Link: "libx.so.1"},
		{Path: "/lib", Link: "usr/lib"},
		{Path: "/lib64", Dir: true}, {Path: "/lib64/ld.so", Link: "/usr/lib/libx.so"},
		{Path: "/loop", Link: "/loop"},
		{Path: "/dangling", Link: "/nowhere"},
	} {
		tree[f.Path] = f
	}
	for p, want := range map[string]bool{
		"/usr/lib/libx.so.1": true, "/usr/lib/libx.so": true, "/lib/libx.so": true, "/lib64/ld.so": true,
		"/usr/lib": false, "/loop": false, "/dangling": false, "/lib/nothing.so": false,
	} {
		if got := resolves(tree, p); got != want {
			t.Errorf("resolves(%s) = %v, want %v", p, got, want)
		}
	}
}

// TestCheckLinked copies the host's `ls` and what it loads into a tree, the
// way a userland is laid out, and removes pieces of it.
func TestCheckLinked(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("uses the host's amd64 programs")
	}
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Skip("no ls")
	}
	ef, err := elf.Open(ls)
	if err != nil {
		t.Skip(err)
	}
	in := interp(ef)
	needed, _ := ef.ImportedLibraries()
	ef.Close()
	if in == "" || len(needed) == 0 {
		t.Skip("ls is static")
	}
	// ls, its interpreter, and the libraries it loads, transitively.
	files := []File{{Path: "/usr/bin/ls", Source: ls}}
	have := map[string]bool{}
	add := func(p string) {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Skipf("host has no %s", p)
		}
		have[p] = true
		files = append(files, File{Path: p, Source: real})
	}
	add(in)
	for queue := needed; len(queue) > 0; {
		lib := queue[0]
		queue = queue[1:]
		p := ""
		for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"} {
			if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
				p = filepath.Join(d, lib)
				break
			}
		}
		if p == "" {
			t.Skipf("host has no %s", lib)
		}
		if have[p] {
			continue
		}
		add(p)
		if lf, err := elf.Open(files[len(files)-1].Source); err == nil {
			more, _ := lf.ImportedLibraries()
			lf.Close()
			queue = append(queue, more...)
		}
	}
	if err := checkLinked(files, amd64); err != nil {
		t.Fatalf("complete tree: %v", err)
	}
	if err := checkLinked(files, arm64); err == nil || !strings.Contains(err.Error(), "/usr/bin/ls is for EM_X86_64") {
		t.Errorf("amd64 programs for arm64: err = %v", err)
	}
	// Without the library ls loads first (the interpreter is files[1]).
	lib := filepath.Base(files[2].Path)
	without := append([]File{files[0], files[1]}, files[3:]...)
	if err := checkLinked(without, amd64); err == nil || !strings.Contains(err.Error(), "/usr/bin/ls needs "+lib) {
		t.Errorf("without %s: err = %v", lib, err)
	}
	if err := checkLinked(files[:1], amd64); err == nil || !strings.Contains(err.Error(), "interpreter "+in+" missing") {
		t.Errorf("without the interpreter: err = %v", err)
	}
}
