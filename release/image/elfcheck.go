package image

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
)

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// multiarchTriplet is Debian's library directory name per architecture.
var multiarchTriplet = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// checkStatic refuses a binary that would not run in a base without a libc or
// on the platform's CPU: it must be an ELF executable for the platform with no
// program interpreter.
func checkStatic(file string, p Platform) error {
	f, err := elf.Open(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s missing: build the binaries for %s first (hack/images.sh does)", file, p)
		}
		return fmt.Errorf("%s: not an ELF executable: %w", file, err)
	}
	defer f.Close()
	if f.Machine != elfMachine[p.Arch] {
		return fmt.Errorf("%s is built for %s, not %s", file, f.Machine, p)
	}
	if interp(f) != "" {
		return fmt.Errorf("%s is dynamically linked; images hold static binaries (CGO_ENABLED=0 or -static)", file)
	}
	return nil
}

func interp(f *elf.File) string {
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return "?"
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// checkLinked proves that every dynamically linked program or library among
// files can be loaded on platform p from files alone: each is built for p's
// CPU, and its interpreter and every library it needs are in the tree. It is
// how an arm64 image is checked on an amd64 machine that cannot run it.
func checkLinked(files []File, p Platform) error {
	tree := map[string]File{}
	for _, f := range files {
		tree[f.Path] = f
	}
	for _, f := range files { // the parents the layer will add
		for dir := path.Dir(f.Path); dir != "/"; dir = path.Dir(dir) {
			if _, ok := tree[dir]; !ok {
				tree[dir] = File{Path: dir, Dir: true}
			}
		}
	}
	dirs := []string{"/lib/" + multiarchTriplet[p.Arch], "/usr/lib/" + multiarchTriplet[p.Arch], "/lib", "/usr/lib", "/lib64", "/usr/lib64"}
	var problems []string
	for _, f := range files {
		if f.Source == "" {
			continue
		}
		ef, err := elf.Open(f.Source)
		if err != nil {
			continue // not an ELF file
		}
		func() {
			defer ef.Close()
			if ef.Machine != elfMachine[p.Arch] {
				problems = append(problems, fmt.Sprintf("%s is for %s", f.Path, ef.Machine))
				return
			}
			if in := interp(ef); in != "" && !resolves(tree, in) {
				problems = append(problems, fmt.Sprintf("%s: interpreter %s missing", f.Path, in))
			}
			needed, err := ef.ImportedLibraries()
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", f.Path, err))
				return
			}
			for _, lib := range needed {
				found := false
				for _, d := range dirs {
					if resolves(tree, path.Join(d, lib)) {
						found = true
						break
					}
				}
				if !found {
					problems = append(problems, fmt.Sprintf("%s needs %s", f.Path, lib))
				}
			}
		}()
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("not loadable on %s: %s", p, strings.Join(problems, "; "))
	}
	return nil
}

// resolves reports whether p names a regular file of the tree, following
// symbolic links (absolute or relative, in any component) up to 40 hops.
func resolves(tree map[string]File, p string) bool {
	for hops := 0; hops < 40; hops++ {
		p = path.Clean(p)
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		cur, redirected := "", false
		for i, part := range parts {
			cur += "/" + part
			f, ok := tree[cur]
			if !ok {
				return false
			}
			if f.Link != "" {
				target := f.Link
				if !strings.HasPrefix(target, "/") {
					target = path.Join(path.Dir(cur), target)
				}
				p = path.Join(append([]string{target}, parts[i+1:]...)...)
				redirected = true
				break
			}
			if i == len(parts)-1 {
				return !f.Dir
			}
		}
		if !redirected {
			return false
		}
	}
	return false
}
