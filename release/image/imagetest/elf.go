// Package imagetest has helpers for tests of image assembly.
package imagetest

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// WriteELF writes the smallest file debug/elf reads as an executable for
// arch: a 64-bit ELF header and, if dynamic, one PT_INTERP program header.
func WriteELF(t testing.TB, path, arch string, dynamic bool) {
	t.Helper()
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF")
	hdr[4], hdr[5], hdr[6] = 2, 1, 1 // 64-bit, little endian, version 1
	le := binary.LittleEndian
	le.PutUint16(hdr[16:], uint16(elf.ET_EXEC))
	le.PutUint16(hdr[18:], uint16(machines[arch]))
	le.PutUint32(hdr[20:], 1)
	le.PutUint16(hdr[52:], 64) // header size
	le.PutUint16(hdr[54:], 56) // program header size
	if dynamic {
		le.PutUint64(hdr[32:], 64) // program headers right after the header
		le.PutUint16(hdr[56:], 1)
		ph := make([]byte, 56)
		le.PutUint32(ph[0:], uint32(elf.PT_INTERP))
		hdr = append(hdr, ph...)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, hdr, 0o755); err != nil {
		t.Fatal(err)
	}
}

// BinDir makes a bin directory with a static executable of each name for
// linux/amd64 and linux/arm64.
func BinDir(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		for _, arch := range []string{"amd64", "arm64"} {
			WriteELF(t, filepath.Join(dir, "linux_"+arch, n), arch, false)
		}
	}
	return dir
}

// RootFS makes the rootfs directory of component name for both
// platforms under binDir, holding one plain file.
func RootFS(t testing.TB, binDir, name string) {
	t.Helper()
	RootFSFile(t, binDir, name, "etc/placeholder", "x")
}

// RootFSFile writes one file, at rel inside the rootfs directory of
// component name, for both platforms under binDir.
func RootFSFile(t testing.TB, binDir, name, rel, content string) {
	t.Helper()
	for _, arch := range []string{"amd64", "arm64"} {
		file := filepath.Join(binDir, "linux_"+arch, "rootfs", name, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
