package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer. Exactly one of Data, Source, Dir or Link
// says what it is; Path is absolute inside the image ("/etc/passwd").
type File struct {
	Path string
	// Data is the content of a regular file.
	Data []byte
	// Source is a host file whose content becomes a regular file.
	Source string
	// Dir makes a directory.
	Dir bool
	// Link makes a symbolic link to this target.
	Link string
	// Mode is the permission bits (and sticky bit); 0 means 0644 for files,
	// 0755 for directories.
	Mode     int64
	UID, GID int
}

// Layer packs files into one gzip-compressed OCI layer that depends on
// nothing but its inputs: entries sorted by path, every parent directory
// present, times set to epoch, numeric owners only. The same files give the
// same digest on any machine.
func Layer(files []File, epoch time.Time) (v1.Layer, error) {
	data, err := layerTar(files, epoch)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

func layerTar(files []File, epoch time.Time) ([]byte, error) {
	entries := map[string]File{}
	for _, f := range files {
		p, err := cleanPath(f.Path)
		if err != nil {
			return nil, err
		}
		kinds := 0
		for _, set := range []bool{f.Data != nil, f.Source != "", f.Dir, f.Link != ""} {
			if set {
				kinds++
			}
		}
		if kinds > 1 {
			return nil, fmt.Errorf("layer entry %s: more than one of data, source, dir and link", f.Path)
		}
		if kinds == 0 {
			f.Data = []byte{}
		}
		if _, dup := entries[p]; dup {
			return nil, fmt.Errorf("layer entry %s given twice", f.Path)
		}
		f.Path = p
		entries[p] = f
	}
	// Parents every entry needs, as root-owned 0755 directories unless given.
	for p := range entries {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if e, ok := entries[dir]; ok {
				if !e.Dir {
					return nil, fmt.Errorf("layer entry %s is inside %s, which is not a directory", p, dir)
				}
				continue
			}
			entries[dir] = File{Path: dir, Dir: true}
		}
	}
	names := make([]string, 0, len(entries))
	for p := range entries {
		names = append(names, p)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		f := entries[p]
		hdr := &tar.Header{
			Name:    p,
			Uid:     f.UID,
			Gid:     f.GID,
			ModTime: epoch.UTC(),
			Format:  tar.FormatPAX,
		}
		var body []byte
		switch {
		case f.Dir:
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, p+"/", orDefault(f.Mode, 0o755)
		case f.Link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			body = f.Data
			if f.Source != "" {
				b, err := os.ReadFile(f.Source)
				if err != nil {
					return nil, fmt.Errorf("layer entry %s: %w", p, err)
				}
				body = b
			}
			hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, int64(len(body)), orDefault(f.Mode, 0o644)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
		if _, err := tw.Write(body); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// cleanPath turns "/etc/passwd" into "etc/passwd" and refuses what would not
// stay inside the image.
func cleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("layer entry %q: path must be absolute", p)
	}
	c := path.Clean(p)
	if c != p || c == "/" {
		return "", fmt.Errorf("layer entry %q: path must be clean and not the root", p)
	}
	return strings.TrimPrefix(c, "/"), nil
}

func orDefault(mode, def int64) int64 {
	if mode == 0 {
		return def
	}
	return mode
}

// DirFiles lists a host directory tree as layer entries at the image's root:
// directories, regular files and symbolic links with their permission bits,
// owned by root. Anything else (a device, a socket) is refused.
func DirFiles(dir string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := File{Path: "/" + filepath.ToSlash(rel), Mode: int64(info.Mode().Perm())}
		if info.Mode()&fs.ModeSticky != 0 {
			f.Mode |= 0o1000
		}
		switch {
		case d.IsDir():
			f.Dir = true
		case info.Mode()&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
			f.Mode = 0
		case info.Mode().IsRegular():
			f.Source = p
		default:
			return fmt.Errorf("%s: %s is neither a file, a directory nor a link", p, info.Mode().Type())
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	return files, nil
}
