package image

import (
	"bytes"
	"encoding/pem"
	"fmt"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// NonRootUID is the user (and group) Gantry's images run as wherever the
// component allows it, the convention of distroless and ko images.
const NonRootUID = 65532

// BaseFiles is the minimal base every Gantry image starts from: the account
// files that name root and the non-root user, the Mozilla root certificates
// (from the pinned golang.org/x/crypto/x509roots/fallback module, so the base
// is the same on every machine), a world-writable /tmp and the users' homes.
// No shell and no package manager.
func BaseFiles() ([]File, error) {
	certs, err := caBundle()
	if err != nil {
		return nil, err
	}
	return []File{
		{Path: "/etc/passwd", Data: []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRootUID, NonRootUID))},
		{Path: "/etc/group", Data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRootUID))},
		{Path: "/etc/nsswitch.conf", Data: []byte("hosts: files dns\n")},
		{Path: "/etc/os-release", Data: []byte("ID=gantry-static\nNAME=\"Gantry static base\"\nPRETTY_NAME=\"Gantry static base\"\nHOME_URL=\"https://github.com/gantry-dev/gantry\"\n")},
		{Path: "/etc/ssl/certs/ca-certificates.crt", Data: certs},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: NonRootUID, GID: NonRootUID},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	}, nil
}

// caBundle renders the NSS roots as PEM. Roots that carry a constraint a PEM
// file cannot express (a distrust-after date) are left out: a client reading
// this file would otherwise trust them without the constraint.
func caBundle() ([]byte, error) {
	var buf bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("no root certificates in the pinned bundle")
	}
	return buf.Bytes(), nil
}
