package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Keys of the certificate Secret (the kubernetes.io/tls layout plus the CA
// bundle), and file names in a certificate directory.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// maxBundleCAs bounds the CA bundle: the current CA and the one before it,
// so that replicas still serving the previous certificate stay trusted
// while they pick up a rotated one.
const maxBundleCAs = 2

// keyPair is a serving certificate with its key and the CA bundle that
// verifies it, all PEM.
type keyPair struct {
	CertPEM, KeyPEM, CABundle []byte
}

// generateKeyPair makes a self-signed CA and a serving certificate for hosts
// (DNS names or IPs), both valid from now for validity. The CA key is
// dropped: nothing else can ever be signed with it, so rotating means a new
// CA. previousCA, when still valid at now, is kept after the new CA in the
// bundle (see maxBundleCAs).
func generateKeyPair(hosts []string, validity time.Duration, now time.Time, previousCA []byte) (*keyPair, error) {
	if len(hosts) == 0 {
		return nil, errors.New("a self-signed certificate needs at least one host name or IP (--tls-san)")
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "gantry-webhook-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	bundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if prev := firstCertificate(previousCA); prev != nil && now.Before(prev.NotAfter) && !bytes.Equal(prev.Raw, caDER) {
		bundle = append(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: prev.Raw})...)
	}
	return &keyPair{
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		CABundle: bundle,
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// firstCertificate is the first certificate of a PEM bundle, or nil.
func firstCertificate(bundle []byte) *x509.Certificate {
	certs := parseCertificates(bundle, 1)
	if len(certs) == 0 {
		return nil
	}
	return certs[0]
}

// parseCertificates parses at most limit certificates of a PEM bundle,
// skipping anything else.
func parseCertificates(bundle []byte, limit int) []*x509.Certificate {
	var certs []*x509.Certificate
	for len(certs) < limit {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			certs = append(certs, c)
		}
	}
	return certs
}

// servingCert is a parsed keyPair.
type servingCert struct {
	pair *keyPair
	cert *tls.Certificate
	leaf *x509.Certificate
}

// parseKeyPair checks that p is usable as the serving certificate for hosts
// at now: it parses, its key matches, the bundle verifies it, it names every
// host, and it is not within renewBefore of its expiry. An error says why it
// must be replaced.
func parseKeyPair(p *keyPair, hosts []string, now time.Time, renewBefore time.Duration) (*servingCert, error) {
	cert, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("the key pair does not parse: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("the certificate does not parse: %w", err)
	}
	cert.Leaf = leaf
	if err := verifiedBy(leaf, p.CABundle, now); err != nil {
		return nil, err
	}
	for _, h := range hosts {
		if err := leaf.VerifyHostname(h); err != nil {
			return nil, fmt.Errorf("the certificate is not valid for %s (--tls-san)", h)
		}
	}
	if now.Before(leaf.NotBefore) {
		return nil, fmt.Errorf("the certificate is not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if !now.Add(renewBefore).Before(leaf.NotAfter) {
		return nil, fmt.Errorf("the certificate expires at %s, within %s", leaf.NotAfter.UTC().Format(time.RFC3339), renewBefore)
	}
	return &servingCert{pair: p, cert: &cert, leaf: leaf}, nil
}

// verifiedBy checks that bundle (PEM) holds a CA that verifies leaf as a
// serving certificate at now.
func verifiedBy(leaf *x509.Certificate, bundle []byte, now time.Time) error {
	cas := parseCertificates(bundle, maxBundleCAs+1)
	if len(cas) == 0 {
		return errors.New("the CA bundle is empty")
	}
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("the CA bundle does not verify the certificate: %w", err)
	}
	return nil
}
